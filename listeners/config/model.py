"""The gateway's configuration: Pulsar's broker.conf keys, validated with pydantic.

This module only validates. Every problem is reported with the key (and the entry) it concerns;
`load_config` gathers them all into one ConfigError instead of stopping at the first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, ValidationError, ValidationInfo, model_validator
from pydantic.alias_generators import to_camel, to_snake
from pydantic_core import InitErrorDetails, PydanticCustomError

from pulsar_lookup_gateway.listeners.config.access_keys import AccessKeys
from pulsar_lookup_gateway.listeners.config.address_keys import ListenerKeys, SocketKeys
from pulsar_lookup_gateway.listeners.config.auth_keys import (
    SECRET_KEY_ALGORITHM,
    TLS_PROVIDER,
    TOKEN_PROVIDER,
    parse_key_url,
)
from pulsar_lookup_gateway.listeners.config.broker_link_keys import BrokerLinkKeys
from pulsar_lookup_gateway.listeners.config.conf_file import (
    RawConfig,
    closest_key,
    read_config_file,
)
from pulsar_lookup_gateway.listeners.config.limit_keys import LimitKeys
from pulsar_lookup_gateway.listeners.config.listener_settings import (
    LISTENER_PREFIX,
    ListenerSettings,
)
from pulsar_lookup_gateway.listeners.config.rules import (
    LEGACY_FIELDS,
    client_routes,
    merge_tls,
    problems_of,
    sockets,
)
from pulsar_lookup_gateway.listeners.config.salvage import (
    PROTOCOL_MAPS,
    declared_listeners,
    parsed_binds,
    parsed_listener_map,
)
from pulsar_lookup_gateway.listeners.config.store_keys import StoreKeys
from pulsar_lookup_gateway.listeners.config.tls_keys import TlsKeys
from pulsar_lookup_gateway.listeners.config.topic_keys import ProtocolHandlerKeys, TopicKeys
from pulsar_lookup_gateway.listeners.config.unknown_keys import sort_keys
from pulsar_lookup_gateway.listeners.endpoints.addresses import AdvertisedListener
from pulsar_lookup_gateway.listeners.endpoints.socket_table import SocketSpec
from pulsar_lookup_gateway.lookup.auto_creation import AutoCreationSettings
from pulsar_lookup_gateway.lookup.networks import NetworkTable, parse_cidr
from pulsar_lookup_gateway.lookup.protocol_listeners import LISTENER_MAP_KEYS, ProtocolListeners
from pulsar_lookup_gateway.lookup.resolve import ResolvePolicy
from pulsar_lookup_gateway.lookup.selection import ClientRoutes
from pulsar_lookup_gateway.tls.settings import TlsSettings

# Names other modules import from here (the configuration's face).
__all__ = [
    "KNOWN_KEYS",
    "LISTENER_PREFIX",
    "SECRET_KEY_ALGORITHM",
    "TLS_PROVIDER",
    "TOKEN_PROVIDER",
    "ConfigError",
    "ConfigProblem",
    "GatewayConfig",
    "ListenerSettings",
    "LoadedConfig",
    "load_config",
    "parse_key_url",
    "validate_raw",
]


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    key: str  # where: the key with the file line or variable it came from, or a file line
    message: str
    name: str = ""  # the bare key ('bindAddresses', 'listener.a.tlsKeyFilePath'); '' for a line

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class ConfigError(Exception):
    def __init__(
        self,
        problems: list[ConfigProblem],
        warnings: list[str] | None = None,
        partial: GatewayConfig | None = None,
    ) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems
        # The unknown keys too: a misspelt key is often why a problem is reported at all.
        self.warnings = warnings or []
        # What validated, for check-config's host checks only (never run): the keys that
        # failed left out, the entries of bindAddresses that parse, no rule between keys run.
        self.partial = partial

    @property
    def keys(self) -> frozenset[str]:
        """The keys that have a problem (a host check that reads one of them is not made)."""
        return frozenset(problem.name for problem in self.problems if problem.name)


class GatewayConfig(
    ProtocolHandlerKeys,
    BrokerLinkKeys,
    TopicKeys,
    AccessKeys,
    LimitKeys,
    ListenerKeys,
    TlsKeys,
    SocketKeys,
    StoreKeys,
):
    """Each key validates on its own, in its group (its field validator sees its own value
    only); the rules that tie keys together run once, on the validated values
    (listeners.config.rules), so neither depends on the order keys are declared or validated in.

    pydantic orders the fields from the last base to the first: the groups are listed last
    first, so the keys keep broker.conf's order, which is the order problems are reported in."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    @model_validator(mode="after")
    def _keys_together(self, info: ValidationInfo) -> GatewayConfig:
        """The rules that tie keys together, on the validated values, all problems at once.
        A second pass of validate_raw (context "failed": the keys that failed on their own,
        at their defaults here) runs the rules those keys do not feed."""
        values = dict(self)
        failed: frozenset[str] = (info.context or {}).get("failed", frozenset())
        problems = problems_of(values, failed)
        if problems:
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError(_RULE_ERROR, message),
                        loc=(to_camel(field),),
                        input=values.get(field),
                    )
                    for field, message in problems
                ],
            )
        if self.internal_listener_name is None and self.advertised_listeners:
            # Unset: the first listener declared, as in Pulsar.
            return self.model_copy(
                update={"internal_listener_name": self.advertised_listeners[0].name}
            )
        return self

    def authentication_required(self, listener: str | None) -> bool:
        """Whether a socket tagged with `listener` (None: a legacy socket) requires
        authentication: its listener's authenticationRequired, else authenticationEnabled."""
        own = self.settings_for(listener).authentication_required
        return self.authentication_enabled if own is None else own

    def tls_for(self, listener: str | None) -> TlsSettings:
        """The TLS settings of a socket tagged with `listener` (None: a legacy socket)."""
        return merge_tls(self.model_dump(), self.listener_settings.get(listener or ""), listener)

    def tls_settings(self) -> dict[str | None, TlsSettings]:
        """The TLS settings of every listener with a TLS socket (None: legacy TLS sockets), and
        of every listener with sniHostnames and TLS material of its own or the global one."""
        tls = {s.listener for s in self.sockets() if s.tls}
        if tls:  # a server name dialled on a TLS socket may pick another listener's certificate
            tls |= {
                name
                for name, own in self.listener_settings.items()
                if own.sni_hostnames and self.tls_for(name).has_material
            }
        listeners = sorted(tls, key=lambda n: n or "")
        return {listener: self.tls_for(listener) for listener in listeners}

    def settings_for(self, listener: str | None) -> ListenerSettings:
        if listener is not None and listener in self.listener_settings:
            return self.listener_settings[listener]
        return _DEFAULT_LISTENER_SETTINGS

    # -- derived views, no I/O ------------------------------------------------------------

    def sockets(self) -> list[SocketSpec]:
        return sockets(dict(self), self.bind_addresses)

    def listener(self, name: str) -> AdvertisedListener | None:
        return next((lst for lst in self.advertised_listeners if lst.name == name), None)

    def client_routes(self) -> ClientRoutes:
        """The sniHostnames and clientCidrs of every listener (validated already)."""
        return client_routes(self.listener_settings)

    def trusted_proxies(self) -> NetworkTable[bool]:
        networks = {parse_cidr(entry): True for entry in self.trusted_proxy_cidrs}
        return NetworkTable.build(networks.items())

    def resolve_policy(self) -> ResolvePolicy:
        maps = {
            protocol: getattr(self, to_snake(key)) for protocol, key in LISTENER_MAP_KEYS.items()
        }
        listeners = ProtocolListeners(
            tuple((protocol, pairs) for protocol, pairs in maps.items() if pairs is not None),
            self.kafka_protocol_map,
        )
        return ResolvePolicy(
            cluster_name=self.cluster_name,
            protocol_listeners=listeners,
            table_view=self.table_view(),
        )

    def auto_creation(self) -> AutoCreationSettings:
        return AutoCreationSettings(
            allow=self.allow_auto_topic_creation,
            topic_type=self.allow_auto_topic_creation_type,
            default_partitions=self.default_num_partitions,
        )


_DEFAULT_LISTENER_SETTINGS = ListenerSettings()
LISTENER_KEYS = frozenset(to_camel(name) for name in ListenerSettings.model_fields)
KNOWN_KEYS = frozenset(
    {to_camel(name) for name in GatewayConfig.model_fields if name != "listener_settings"}
    | {"zookeeperServers", "configurationStoreServers"}
)
#: Keys earlier versions of the gateway used: a config that sets one still loads, with a
#: warning that says why the key no longer does anything.
RETIRED_KEYS: Mapping[str, str] = {
    "unownedBundleRedirect": (
        "retired: a bundle nobody owns always gets a non-authoritative redirect (to the "
        "load-manager leader, else to a live broker chosen by the bundle's hash); "
        "'least-loaded' sent it authoritatively, which made the broker take the bundle "
        "without its load manager"
    ),
    "defaultNumberOfNamespaceBundles": (
        "not used by lookups: as on Pulsar's brokers, a namespace whose policies hold no "
        "bundle data has one bundle over the whole hash range (the broker applies this key "
        "only when it creates a namespace)"
    ),
}


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    config: GatewayConfig
    warnings: list[str]


def validate_raw(raw: RawConfig, *, strict: bool = False) -> LoadedConfig:
    """Validate the key/value pairs; raises ConfigError holding every problem found.
    `strict`: a key the gateway does not use is a problem, not a warning (see unknown_keys)."""
    problems = [ConfigProblem(where, message) for where, message in raw.problems]
    config: GatewayConfig | None = None
    keys = sort_keys(
        raw,
        known=KNOWN_KEYS,
        listener_keys=LISTENER_KEYS,
        retired=RETIRED_KEYS,
        prefix=LISTENER_PREFIX,
        strict=strict,
    )
    problems += [ConfigProblem(where, message, key) for where, message, key in keys.problems]
    values: dict[str, Any] = dict(keys.values)
    values["listenerSettings"] = keys.per_listener
    warnings = keys.warnings
    partial: GatewayConfig | None = None
    try:
        config = partial = GatewayConfig.model_validate(values)
    except ValidationError as exc:
        problems += _problems_of(exc, raw)
        if not all(err["type"] == _RULE_ERROR for err in exc.errors()):
            # Keys failed on their own, so the rules between keys were not run yet.
            problems += _rules_despite(exc, values, raw)
        partial = _partial(exc, values)
    if problems or config is None:
        raise ConfigError(problems, warnings, partial)
    return LoadedConfig(config, warnings)


#: The error type of a rule between keys (a key failing on its own has pydantic's types).
_RULE_ERROR = "config_rule"
#: What stands in, in the later passes, for a required key that failed: no rule reads it, and
#: a host check is not made on a key that has a problem.
_STAND_INS = {"metadataStoreUrl": "file:/"}
_ALL_FIELDS = frozenset(GatewayConfig.model_fields)


def _failed_keys(exc: ValidationError) -> set[str]:
    return {str(err["loc"][0]) for err in exc.errors() if err["loc"]}


def _listener_keys_kept(
    per_listener: Mapping[str, Mapping[str, str]], errors: list[Any]
) -> dict[str, dict[str, str]]:
    """The per-listener keys without those that failed (`errors`: pydantic's); server names
    and client networks that clash (an error of the whole table) are all left out."""
    kept = {name: dict(keys) for name, keys in per_listener.items()}
    for err in errors:
        loc = err["loc"]
        if loc[:1] == ("listenerSettings",) and len(loc) >= 3:
            kept.get(str(loc[1]), {}).pop(str(loc[2]), None)
        elif loc[:1] == ("listenerSettings",):
            for keys in kept.values():
                keys.pop("sniHostnames", None)
                keys.pop("clientCidrs", None)
    return kept


def _salvaged(values: dict[str, Any], exc: ValidationError) -> tuple[dict[str, Any], set[str]]:
    """`values` without the keys that failed, but for the entries of advertisedListeners,
    bindAddresses and the protocol listener maps that parse (see config_salvage) and the
    per-listener keys that validated; and the keys that stay failed."""
    failed_keys = _failed_keys(exc)
    rest = {key: value for key, value in values.items() if key not in failed_keys}
    failed = set(failed_keys)
    if "listenerSettings" in failed:  # one listener's bad key does not hide the rules
        rest["listenerSettings"] = _listener_keys_kept(
            values.get("listenerSettings", {}), exc.errors()
        )
        failed.discard("listenerSettings")
    salvage: dict[str, Callable[[str], object | None]] = {
        "advertisedListeners": declared_listeners,
        "bindAddresses": parsed_binds,
        **{
            f"{protocol}ListenerMap": partial(parsed_listener_map, protocol)
            for protocol in PROTOCOL_MAPS
        },
    }
    for key, entries in salvage.items():
        if key in failed and isinstance(values.get(key), str):
            kept = entries(values[key])
            if kept is not None:
                rest[key] = kept
                failed.discard(key)
    for key, stand_in in _STAND_INS.items():
        rest.setdefault(key, stand_in)
    return rest, failed


def _rules_despite(
    exc: ValidationError, values: dict[str, Any], raw: RawConfig
) -> list[ConfigProblem]:
    """The problems of the rules between keys that did validate, when some key did not: a
    second pass with the failed keys at their defaults (the entries of a list that parse
    kept), and the rules they feed not run."""
    rest, failed_keys = _salvaged(values, exc)
    found: list[ConfigProblem] = []
    for _ in range(3):  # a pass may find what the one before could not validate yet
        failed = frozenset(to_snake(key) for key in failed_keys)
        try:
            GatewayConfig.model_validate(rest, context={"failed": failed})
        except ValidationError as again:
            found += _problems_of(again, raw)
            if all(err["type"] == _RULE_ERROR for err in again.errors()):
                break
            rest, more = _salvaged(rest, again)
            failed_keys |= more
        else:
            break
    return found


def _partial(exc: ValidationError, values: dict[str, Any]) -> GatewayConfig | None:
    """What validates of a config with problems, no rule between keys run; None when even that
    fails. A failed legacy port (or bindAddress) opens no socket here, rather than the default
    one; a failed listener.<name>.<key> drops that key only."""
    rest, failed = _salvaged(values, exc)
    # The keys that failed on their own are out (or salvaged) already, a listener's one by one.
    per_listener = rest.get("listenerSettings", {})
    errors: list[Any] = []
    for _ in range(3):  # each pass drops what failed in the one before
        per_listener = _listener_keys_kept(per_listener, errors)
        for err in errors:
            if err["loc"] and err["loc"][:1] != ("listenerSettings",):
                failed.add(str(err["loc"][0]))
                rest.pop(str(err["loc"][0]), None)
        rest["listenerSettings"] = per_listener
        for key in LEGACY_FIELDS:
            if key in failed or "bindAddress" in failed:
                rest[key] = ""
        rest.update({key: stand_in for key, stand_in in _STAND_INS.items() if key in failed})
        try:
            return GatewayConfig.model_validate(rest, context={"failed": _ALL_FIELDS})
        except ValidationError as again:
            errors = again.errors()
    return None


def _did_you_mean(key: str, known: frozenset[str]) -> str:
    near = closest_key(key, known)
    return f"; did you mean '{near}'?" if near else ""


def load_config(path: Path, env: Mapping[str, str], *, strict: bool = False) -> LoadedConfig:
    return validate_raw(read_config_file(path, env), strict=strict)


def _problems_of(exc: ValidationError, raw: RawConfig) -> list[ConfigProblem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        key = str(loc[0]) if loc else "config"
        if key in GatewayConfig.model_fields:  # a default that failed validation: its key
            key = to_camel(key)
        if key == "listenerSettings" and len(loc) >= 3:
            key = f"{LISTENER_PREFIX}{loc[1]}.{loc[2]}"
            if err["type"] == "extra_forbidden":
                err["msg"] = "not a per-listener key" + _did_you_mean(str(loc[2]), LISTENER_KEYS)
        if key == "listenerSettings":
            message = err["msg"].removeprefix("Value error, ")
            for line in message.split("\n"):
                name, _, text = line.partition(": ")
                problems.append(ConfigProblem(name, text, name))
            continue
        if err["type"] == "missing" and key == "metadataStoreUrl":
            message = "required: zk:host:port[,host:port][/chroot] or file:PATH"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if key in raw.values and err["type"] not in ("value_error", _RULE_ERROR):
                message = f"{message} (got '{raw.values[key]}')"
        where = f"{key} ({raw.sources[key]})" if key in raw.sources else key
        problems += [ConfigProblem(where, line, key) for line in message.split("\n")]
    return problems
