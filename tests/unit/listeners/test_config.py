"""Configuration: broker.conf syntax, environment overrides, and every PIP-95 rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_lookup_gateway.listeners.config.conf_file import (
    closest_key,
    parse_properties,
    read_config_file,
)
from pulsar_lookup_gateway.listeners.config.model import (
    KNOWN_KEYS,
    ConfigError,
    GatewayConfig,
    LoadedConfig,
    load_config,
    validate_raw,
)
from pulsar_lookup_gateway.listeners.endpoints.addresses import Scheme

BASE = "metadataStoreUrl=zk:127.0.0.1:2181\n"
TWO = "advertisedListeners=internal:pulsar://10.0.0.1:6650,external:pulsar://gw.example.com:6650\n"
TLS = "tlsCertificateFilePath=/c.pem\ntlsKeyFilePath=/k.pem\n"


def load(text: str) -> LoadedConfig:
    return validate_raw(parse_properties(text, "test.conf"))


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(text)
    return [str(p) for p in info.value.problems]


def only_problem(text: str) -> str:
    found = problems(text)
    assert len(found) == 1, found
    return found[0]


def test_defaults_open_the_legacy_ports_untagged() -> None:
    config = load(BASE).config
    table = [(s.endpoint.url, s.listener, s.origin) for s in config.sockets()]
    assert table == [
        ("pulsar://0.0.0.0:6650", None, "brokerServicePort"),
        ("http://0.0.0.0:8080", None, "webServicePort"),
    ]
    assert config.internal_listener_name is None
    assert config.max_concurrent_lookup_request == 50_000
    assert config.configuration_metadata_store_url is None
    assert config.cluster_name is None


def test_properties_syntax() -> None:
    raw = parse_properties(
        "# comment\n! also a comment\n\n  a = 1 \nb:2\nc=x\\\n  y\nd=\nbroken\nb=3\n", "f"
    )
    assert raw.values == {"a": "1", "b": "3", "c": "xy", "d": ""}
    assert raw.sources["b"] == "f:10"
    assert raw.problems == [("f:9", "expected key=value, got 'broken'")]


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "g.conf"
    conf.write_text(BASE + "webServicePort=8080\n")
    env = {
        "PULSAR_GATEWAY_webServicePort": "9090",
        "PULSAR_GATEWAY_advertisedListeners": "internal:pulsar://h:1",
        "UNRELATED": "x",
    }
    config = load_config(conf, env).config
    assert config.web_service_port == 9090
    assert [listener.name for listener in config.advertised_listeners] == ["internal"]
    raw = read_config_file(conf, env)
    assert raw.sources["webServicePort"] == "PULSAR_GATEWAY_webServicePort"


def test_environment_errors_name_the_variable(tmp_path: Path) -> None:
    conf = tmp_path / "g.conf"
    conf.write_text(BASE)
    with pytest.raises(ConfigError) as info:
        load_config(conf, {"PULSAR_GATEWAY_webServicePort": "http"})
    assert "webServicePort (PULSAR_GATEWAY_webServicePort)" in str(info.value)


def test_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "missing.conf", {})


def test_unknown_keys_are_warnings_not_errors() -> None:
    loaded = load(BASE + "managedLedgerDefaultEnsembleSize=2\n")
    assert loaded.warnings == [
        "managedLedgerDefaultEnsembleSize (test.conf:2): not a key the gateway uses; ignored"
    ]


NO_LEGACY = "brokerServicePort=\nwebServicePort=\n"


def test_a_config_that_opens_no_socket_is_an_error_naming_the_keys() -> None:
    with pytest.raises(ConfigError) as info:
        load(BASE + TWO + NO_LEGACY + "bindAdresses=internal:pulsar://127.0.0.1:6650\n")
    typo, no_socket = [str(p) for p in info.value.problems]
    # The misspelt key is an error of its own, beside the problem it causes.
    assert typo.startswith("bindAdresses (test.conf:5): not a key the gateway uses, one edit")
    assert typo.endswith("did you mean 'bindAddresses'?")
    assert no_socket.startswith("bindAddresses: no socket would open")
    for key in ("brokerServicePort", "brokerServicePortTls", "webServicePort", "webServicePortTls"):
        assert key in no_socket
    assert info.value.warnings == []


@pytest.mark.parametrize(
    "sockets",
    ["brokerServicePortTls=6651\n" + TLS, "webServicePortTls=0\n" + TLS,
     "bindAddresses=internal:http://127.0.0.1:0\n"],
)  # fmt: skip
def test_one_socket_of_any_kind_is_enough(sockets: str) -> None:
    assert len(load(BASE + TWO + NO_LEGACY + sockets).config.sockets()) == 1


def test_an_invalid_port_is_reported_once_not_as_no_socket_too() -> None:
    assert only_problem(BASE + "brokerServicePort=x\nwebServicePort=\n").startswith(
        "brokerServicePort (test.conf:2)"
    )


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("webservicePortTLS", "webServicePortTls"),  # case only: Java's keys are exact
        ("brokerServicPrt", "brokerServicePort"),  # two edits: maybe a key of Pulsar's own
        ("managedLedgerDefaultEnsembleSize", None),
        ("tlsTrustStore", None),  # a Pulsar key of its own, not a typo of tlsKeyStore
        ("bindAddressesXYZ", None),  # three edits away
        ("b" * 10_000, None),
    ],
)
def test_unknown_keys_near_a_gateway_key_get_a_suggestion(typed: str, meant: str | None) -> None:
    if meant is not None and typed.lower() == meant.lower():
        assert "did you mean 'webServicePortTls'?" in only_problem(BASE + f"{typed}=1\n")
        return
    [warning] = load(BASE + f"{typed}=1\n").warnings
    assert warning.startswith(f"{typed} (test.conf:2): not a key the gateway uses; ignored")
    if meant is None:
        assert "did you mean" not in warning
    else:
        assert warning.endswith(f"; did you mean '{meant}'?")


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("bindAdresses", "bindAddresses"),
        ("BINDADDRESSES", "bindAddresses"),
        ("advertisedListener", "advertisedListeners"),
        ("tlsKeyFilepath", "tlsKeyFilePath"),
        ("maxConnectionPerIp", "maxConnectionsPerIp"),
        ("bind_address", "bindAddress"),  # a field's name is not a broker.conf key
    ],
)
def test_a_key_one_edit_from_a_gateway_key_is_an_error(typed: str, meant: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(BASE + f"{typed}=1\n")
    [problem] = info.value.problems
    assert problem.name == typed
    assert str(problem).startswith(f"{typed} (test.conf:2): not a key the gateway uses, one edit")
    assert str(problem).endswith(f"did you mean '{meant}'?")
    assert info.value.warnings == []


def test_strict_makes_every_unused_key_an_error() -> None:
    text = BASE + "managedLedgerDefaultEnsembleSize=2\nunownedBundleRedirect=x\n"
    assert len(load(text).warnings) == 2
    with pytest.raises(ConfigError) as info:
        validate_raw(parse_properties(text, "test.conf"), strict=True)
    assert [p.name for p in info.value.problems] == [
        "managedLedgerDefaultEnsembleSize",
        "unownedBundleRedirect",
    ]
    assert all("(--strict refuses every unused key)" in str(p) for p in info.value.problems)
    assert info.value.warnings == []
    # The keys the gateway uses pass as they do without --strict.
    assert validate_raw(parse_properties(BASE + TWO, "t"), strict=True).warnings == []


def test_a_bad_per_listener_key_hides_no_other_problem() -> None:
    """The issue's config: a misspelt per-listener key, a listener not declared in
    bindAddresses, a port clash and two misspelt keys, all reported in one run."""
    found = problems(
        BASE + TWO + NO_LEGACY + "bindAddresses=internal:pulsar://127.0.0.1:6650,"
        "ghost:pulsar://127.0.0.1:6651,external:pulsar://127.0.0.1:6650\n"
        "listener.external.clientCidr=10.0.0.0/8\nbindAdresses=x\nadvertisedListener=y\n"
    )
    assert len(found) == 5, found
    assert found[0] == (
        "listener.external.clientCidr (test.conf:6): not a per-listener key; "
        "did you mean 'clientCidrs'?"
    )
    assert any("listener 'ghost' is not declared" in p for p in found)
    assert any("already binds (127.0.0.1:6650)" in p for p in found)
    assert any(p.startswith("bindAdresses (test.conf:7)") for p in found)
    assert any(p.startswith("advertisedListener (test.conf:8)") for p in found)


@pytest.mark.parametrize(
    "bad",
    [
        "listener.external.authenticationRequired=maybe\n",  # fails on its own
        "listener.external.clientCidrs=10.0.0.0/8,bogus\n",  # fails as a table
        "listener.external.authenticationRequired=maybe\nlistener.external.clientCidrs=x\n",
        "listener.external=1\n",  # no key after the name
    ],
)
def test_a_per_listener_value_that_fails_hides_no_rule(bad: str) -> None:
    found = problems(BASE + TWO + "bindAddresses=ghost:pulsar://127.0.0.1:6651\n" + bad)
    assert any("listener 'ghost' is not declared" in p for p in found), found
    assert found[0].startswith("listener.external")


def test_per_listener_keys_get_a_suggestion_too() -> None:
    message = only_problem(BASE + TWO + "listener.external.tlsKeyFilepath=/k.pem\n")
    assert "listener.external.tlsKeyFilepath" in message
    assert "not a per-listener key; did you mean 'tlsKeyFilePath'?" in message


def _levenshtein(a: str, b: str) -> int:
    """The textbook full table, to check the banded, early-stopping one against."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        row, previous = [i], row
        for j, y in enumerate(b, 1):
            row.append(min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (x != y)))
    return row[-1]


@given(st.text(alphabet="abAB", max_size=8), st.text(alphabet="abAB", max_size=8))
def test_a_suggestion_is_made_exactly_within_two_edits(typed: str, known: str) -> None:
    near = _levenshtein(typed.lower(), known.lower()) <= 2
    assert closest_key(typed, [known]) == (known if near else None)


def test_the_nearest_key_wins() -> None:
    assert closest_key("bindAdress", KNOWN_KEYS) == "bindAddress"  # 1 edit; bindAddresses: 3
    assert closest_key("bindAdresses", KNOWN_KEYS) == "bindAddresses"  # 1 edit; bindAddress: 3
    # A tie (one edit from both) is broken alphabetically, so the hint never changes.
    assert closest_key("bindAddresse", KNOWN_KEYS) == "bindAddress"


def test_zookeeper_servers_is_the_legacy_spelling() -> None:
    config = load("zookeeperServers=zk1:2181,zk2:2182\n").config
    assert config.metadata_store_url.hosts == (("zk1", 2181), ("zk2", 2182))


def test_listeners_and_bind_addresses() -> None:
    config = load(
        BASE + "advertisedListeners=internal:pulsar://10.0.0.1:6650, internal:http://10.0.0.1:8080,"
        " external:pulsar+ssl://gw.example.com:6651,external:https://gw.example.com\n"
        "bindAddresses=internal:pulsar://127.0.0.1:6660,external:pulsar://127.0.0.1:6661,"
        "internal:http://127.0.0.1:0,external:http://127.0.0.1:0\n"
        "brokerServicePort=\nwebServicePort=\n"
    ).config
    assert [lst.name for lst in config.advertised_listeners] == ["internal", "external"]
    assert config.internal_listener_name == "internal"  # the first listener
    external = config.listener("external")
    assert external is not None
    assert external.url(Scheme.HTTPS) == "https://gw.example.com:443"  # default port
    assert external.url(Scheme.PULSAR) is None  # TLS-only listener: legal
    assert [(s.endpoint.url, s.listener) for s in config.sockets()] == [
        ("pulsar://127.0.0.1:6660", "internal"),
        ("pulsar://127.0.0.1:6661", "external"),
        ("http://127.0.0.1:0", "internal"),
        ("http://127.0.0.1:0", "external"),  # port 0: each socket its own port
    ]


def test_plaintext_socket_behind_a_tls_advertised_listener_is_legal() -> None:
    config = load(
        BASE + "advertisedListeners=ext:pulsar+ssl://gw:6651\n"
        "bindAddresses=ext:pulsar://127.0.0.1:6650\nbrokerServicePort=\n"
    ).config
    assert [s.tls for s in config.sockets()] == [False, False]  # webServicePort stays


def test_all_four_schemes_in_one_listener() -> None:
    text = "advertisedListeners=a:pulsar://h:1,a:pulsar+ssl://h:2,a:http://h:3,a:https://h:4\n"
    listener = load(BASE + text).config.advertised_listeners[0]
    assert len(listener.endpoints) == 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("advertisedListeners=pulsar://h:1", "entry 'pulsar://h:1' has no listener name"),
        ("advertisedListeners=b@d:pulsar://h:1", "listener name 'b@d': use letters"),
        ("advertisedListeners=" + "n" * 129 + ":pulsar://h:1", "at most 128 characters"),
        ("advertisedListeners=a:ftp://h:1", "entry 'a:ftp://h:1': unknown scheme 'ftp'"),
        ("advertisedListeners=a:h:1", "'h:1' is not a URL"),
        ("advertisedListeners=a:pulsar://:1", "no host"),
        ("advertisedListeners=a:pulsar://h:99999", "entry 'a:pulsar://h:99999': Port out of range"),
        ("advertisedListeners=a:pulsar://h:1/path", "only scheme://host:port"),
        ("advertisedListeners=a:pulsar://h:1,a:pulsar://h:2", "already has a pulsar URL"),
        ("advertisedListeners=a:pulsar://h:1,b:http://h:1", "already advertised by listener 'a'"),
        ("advertisedListeners=a:pulsar://h:1\ninternalListenerName=b", "'b' is not declared"),
        ("internalListenerName=b", "'b' is not declared in advertisedListeners (none)"),
        ("advertisedListeners=a:pulsar://h:1\nbindAddresses=a:pulsar://127.0.0.1", "no port"),
        ("advertisedListeners=a:pulsar://h:1\nbindAddresses=a:udp://127.0.0.1:1", "unknown scheme"),
        ("advertisedListeners=a:pulsar://h:1\nbindAddresses=b:pulsar://127.0.0.1:7000",
         "listener 'b' is not declared in advertisedListeners"),
        ("bindAddresses=a:pulsar://127.0.0.1:7000", "listener 'a' is not declared"),
        ("advertisedListeners=a:pulsar://h:1,b:pulsar://i:1\n"
         "bindAddresses=a:pulsar://127.0.0.1:7000,b:http://127.0.0.1:7000",
         "entry 'b:http://127.0.0.1:7000' binds 127.0.0.1:7000, which entry "
         "'a:pulsar://127.0.0.1:7000' already binds"),
        ("advertisedListeners=a:pulsar://h:1,b:pulsar://i:1\n"
         "bindAddresses=a:pulsar://127.0.0.1:7000,b:pulsar://127.0.0.1:7000",
         "binds 127.0.0.1:7000"),
        ("advertisedListeners=a:pulsar://h:1\nbindAddresses=a:pulsar://127.0.0.1:6650",
         "which brokerServicePort already binds (0.0.0.0:6650)"),
        ("advertisedListeners=a:pulsar+ssl://h:1\nbindAddresses=a:pulsar+ssl://127.0.0.1:7000",
         "is a TLS socket but no TLS material is configured"),
        ("brokerServicePortTls=6651", "brokerServicePortTls is a TLS socket but no TLS material"),
        ("webServicePort=http", "webServicePort (test.conf:2): Input should be a valid integer"),
        ("webServicePort=70000", "less than or equal to 65535"),
        ("configurationMetadataStoreUrl=zoo:h:1", "'zoo:h:1' is neither zk:"),
        ("tlsRequireTrustedClientCertOnConnect=maybe", "valid boolean"),
        ("tlsKeyStoreType=JKS", "'JKS' is not PEM or PKCS12"),
    ],
)  # fmt: skip
def test_each_rule_names_the_key_and_the_entry(text: str, expected: str) -> None:
    message = only_problem(BASE + text + "\n")
    assert expected in message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("", "metadataStoreUrl: required"),
        ("metadataStoreUrl=etcd:h:1", "is neither zk:"),
        ("metadataStoreUrl=zk:h:port", "no valid port"),
        ("metadataStoreUrl=file:", "needs a path"),
    ],
)
def test_metadata_store_url(text: str, key: str) -> None:
    assert key in only_problem(text + "\n")


@pytest.mark.parametrize(
    ("url", "hosts", "chroot"),
    [
        ("zk:h1:2181", (("h1", 2181),), ""),
        ("zk:h1:2181,h2:2182/pulsar/a", (("h1", 2181), ("h2", 2182)), "/pulsar/a"),
        ("zk:h1/", (("h1", 2181),), ""),
    ],
)
def test_zk_urls(url: str, hosts: tuple[tuple[str, int], ...], chroot: str) -> None:
    config = load(f"metadataStoreUrl={url}\n").config
    assert (config.metadata_store_url.hosts, config.metadata_store_url.chroot) == (hosts, chroot)


def test_pkcs12_keystore_is_tls_material() -> None:
    text = BASE + "tlsKeyStoreType=pkcs12\ntlsKeyStore=/ks.p12\nbrokerServicePortTls=6651\n"
    assert load(text).config.tls_key_store_type == "PKCS12"
    assert load(BASE + TLS + "webServicePortTls=8443\n").config.sockets()[-1].tls


def test_every_problem_is_reported_not_only_the_first() -> None:
    found = problems(
        "broken line\n"
        "webServicePort=x\n"
        "advertisedListeners=a:pulsar://h:1,b:pulsar://h:2\n"
        "internalListenerName=zzz\n"
        "bindAddresses=a:pulsar://127.0.0.1:7000,c:pulsar://127.0.0.1:7001,"
        "b:pulsar+ssl://127.0.0.1:7000\n"
    )
    assert len(found) == 7, found
    joined = "\n".join(found)
    for fragment in (
        "expected key=value",
        "metadataStoreUrl: required",
        "webServicePort",
        "'zzz' is not declared",
        "listener 'c' is not declared",
        "binds 127.0.0.1:7000",
        "no TLS material",
    ):
        assert fragment in joined


@given(st.dictionaries(st.sampled_from(sorted(GatewayConfig.model_fields)), st.text(max_size=80)))
def test_arbitrary_values_raise_only_config_errors(values: dict[str, str]) -> None:
    from pydantic.alias_generators import to_camel

    text = "".join(f"{to_camel(k)}={v.replace(chr(10), ' ')}\n" for k, v in values.items())
    try:
        load(text)
    except ConfigError as exc:
        assert exc.problems


@given(st.text(max_size=200))
def test_arbitrary_file_text_raises_only_config_errors(text: str) -> None:
    try:
        load(text)
    except ConfigError as exc:
        assert exc.problems


@given(st.text(alphabet=st.sampled_from(list("ab:/,.@ 0123456789+phtuslr[]")), max_size=60))
def test_arbitrary_listener_lists_raise_only_config_errors(text: str) -> None:
    try:
        load(BASE + f"advertisedListeners={text}\nbindAddresses={text}\n")
    except ConfigError as exc:
        assert exc.problems


def test_per_listener_tls_material_overrides_the_global_keys() -> None:
    text = (
        BASE + TLS + "advertisedListeners=a:pulsar+ssl://h:1,b:https://i:2\n"
        "bindAddresses=a:pulsar+ssl://127.0.0.1:7001,b:https://127.0.0.1:7002\n"
        "listener.b.tlsCertificateFilePath=/b.pem\nlistener.b.tlsKeyFilePath=/b.key\n"
        "listener.b.tlsRequireTrustedClientCertOnConnect=true\nlistener.b.tlsProtocols=TLSv1.3\n"
        "tlsTrustCertsFilePath=/ca.pem\n"
    )
    config = load(text).config
    a, b, legacy = config.tls_for("a"), config.tls_for("b"), config.tls_for(None)
    assert (a.certificate_file, a.key_file, a.require_client_cert) == ("/c.pem", "/k.pem", False)
    assert (b.certificate_file, b.key_file, b.require_client_cert) == ("/b.pem", "/b.key", True)
    assert b.trust_certs_file == "/ca.pem"  # not overridden: the global value
    assert (b.protocols, a.protocols) == (("TLSv1.3",), ())
    assert legacy == a and legacy.refresh_seconds == 300


def test_a_listener_with_its_own_material_needs_no_global_material() -> None:
    text = (
        BASE + "advertisedListeners=a:pulsar+ssl://h:1,b:https://i:2\n"
        "bindAddresses=a:pulsar+ssl://127.0.0.1:7001,b:https://127.0.0.1:7002\n"
        "listener.a.tlsKeyStoreType=PKCS12\nlistener.a.tlsKeyStore=/a.p12\n"
    )
    message = only_problem(text)
    assert "entry 'b:https://127.0.0.1:7002' is a TLS socket but no TLS material" in message
    assert "listener.b.<key>" in message
    assert load(text + "listener.b.tlsKeyStoreType=pkcs12\nlistener.b.tlsKeyStore=/b.p12\n")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("listener.a.tlsKeyStoreType=JKS", "listener.a.tlsKeyStoreType (test.conf:3): 'JKS'"),
        ("listener.a.tlsRequireTrustedClientCertOnConnect=perhaps", "valid boolean"),
        ("listener.zz.tlsKeyStore=/x", "listener.zz.*: listener is not declared"),
        ("listener.a.tlsKeystore=/x", "listener.a.tlsKeystore (test.conf:3): not a per-listener"),
    ],
)
def test_per_listener_key_errors(line: str, expected: str) -> None:
    assert expected in only_problem(BASE + "advertisedListeners=a:pulsar://h:1\n" + line + "\n")


def test_configuration_store_and_cluster_name() -> None:
    config = load(
        BASE + "configurationMetadataStoreUrl=zk:zk-g:2181/global\nclusterName=us-west\n"
    ).config
    assert str(config.configuration_metadata_store_url) == "zk:zk-g:2181/global"
    assert config.resolve_policy().cluster_name == "us-west"
    # Pulsar's older key, and blank values meaning unset.
    legacy = load(BASE + "configurationStoreServers=zk-g:2181\n").config
    assert str(legacy.configuration_metadata_store_url) == "zk:zk-g:2181"
    blank = load(BASE + "configurationMetadataStoreUrl=\nclusterName= \n")
    assert blank.config.configuration_metadata_store_url is None
    assert blank.config.cluster_name is None and blank.warnings == []


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("unownedBundleRedirect=least-loaded", "always gets a non-authoritative redirect"),
        ("unownedBundleRedirect=leader", "always gets a non-authoritative redirect"),
        ("defaultNumberOfNamespaceBundles=16", "one bundle over the whole hash range"),
    ],
)
def test_retired_keys_still_load_with_a_warning_saying_why(line: str, why: str) -> None:
    [warning] = load(BASE + line + "\n").warnings
    key = line.split("=")[0]
    assert warning.startswith(f"{key} (test.conf:2): ")
    assert why in warning and warning.endswith("; ignored")


def test_proxy_through_service_url_is_refused_when_true() -> None:
    listeners = "advertisedListeners=edge:pulsar://gw:6650\n"
    message = only_problem(BASE + listeners + "listener.edge.proxyThroughServiceUrl=true\n")
    assert message.startswith("listener.edge.proxyThroughServiceUrl (test.conf:3): ")
    assert "answers lookups only" in message and "proxy_to_broker_url" in message
    assert load(BASE + listeners + "listener.edge.proxyThroughServiceUrl=false\n").warnings == []


def test_no_key_validator_reads_another_key() -> None:
    """A field validator sees only its own value (it takes no ValidationInfo, whose `data`
    holds the keys validated before it): the rules between keys are one model-level pass,
    so the order keys are declared or validated in cannot change a result."""
    # Every validator pydantic runs, read from the compiled schema: decorated ones, those of
    # Annotated types (listener_settings, auth_keys) and those of nested models alike.
    validators: list[tuple[str, str]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            function = node.get("function")
            if str(node.get("type", "")).startswith("function-") and isinstance(function, dict):
                name = getattr(function["function"], "__qualname__", repr(function["function"]))
                validators.append((name, function["type"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(GatewayConfig.__pydantic_core_schema__)
    assert len(validators) > 40  # (the walk reached the fields)
    with_info = [name for name, info in validators if info == "with-info"]
    # ... but the one that runs the rules between keys (config_rules), after them all
    decorators = GatewayConfig.__pydantic_decorators__
    (rules,) = [d for d in decorators.model_validators.values() if d.info.mode == "after"]
    assert with_info == [f"GatewayConfig.{rules.func.__name__}"]


@pytest.mark.parametrize(
    ("broken", "expected_key"),
    [
        # a key declared before every key the rules read, and one declared after them all
        ("webServicePort=x\n", "webServicePort"),
        ("tlsEnabledWithBroker=maybe\n", "tlsEnabledWithBroker"),
    ],
)
def test_the_rules_between_keys_run_whichever_key_failed(broken: str, expected_key: str) -> None:
    found = problems(
        broken
        + "metadataStoreUrl=file:/x.json\n"
        + "advertisedListeners=a:pulsar://h:1\n"
        + "bindAddresses=b:pulsar://127.0.0.1:7001\n"
        + "authorizationEnabled=true\n"
    )
    assert [p.split(" ")[0].rstrip(":") for p in found] == [
        expected_key,
        "bindAddresses",
        "authorizationEnabled",
    ], found
    assert "listener 'b' is not declared in advertisedListeners" in found[1]


def test_a_rule_fed_by_a_key_that_failed_is_not_run() -> None:
    """bindAddresses names a listener of advertisedListeners: when advertisedListeners itself
    is broken, that is the one problem (not a second one about every bind address)."""
    found = problems(
        "metadataStoreUrl=file:/x.json\n"
        "advertisedListeners=not a listener\n"
        "bindAddresses=b:pulsar://127.0.0.1:7001\n"
    )
    assert len(found) == 1 and found[0].startswith("advertisedListeners"), found


def test_the_entries_that_parse_feed_the_rules_in_the_same_pass() -> None:
    """One bad entry of advertisedListeners or bindAddresses no longer hides the problems of the
    other entries (an undeclared listener, two sockets on one port) until a second run."""
    found = problems(
        BASE + NO_LEGACY + "advertisedListeners=a:pulsar://h:1,b:gopher://h:2\n"
        "internalListenerName=zzz\n"
        "bindAddresses=a:pulsar://127.0.0.1:7000,a:ftp://127.0.0.1:7001,"
        "c:pulsar://127.0.0.1:7002,b:http://127.0.0.1:7000\n"
    )
    assert len(found) == 5, found
    joined = "\n".join(found)
    for fragment in (
        "entry 'b:gopher://h:2': unknown scheme 'gopher'",
        "entry 'a:ftp://127.0.0.1:7001': unknown scheme 'ftp'",
        "internalListenerName (test.conf:5): 'zzz' is not declared in advertisedListeners (a, b)",
        "entry 'c:pulsar://127.0.0.1:7002': listener 'c' is not declared",
        "entry 'b:http://127.0.0.1:7000' binds 127.0.0.1:7000",
    ):
        assert fragment in joined
    # 'b' is declared by its entry that failed: no problem says otherwise
    assert "listener 'b' is not declared" not in joined


@pytest.mark.parametrize("key", ["kafkaListenerMap", "mqttListenerMap", "grpcListenerMap"])
def test_a_bad_entry_of_a_listener_map_hides_no_undeclared_listener(key: str) -> None:
    name = {"kafkaListenerMap": "kafka_x", "mqttListenerMap": "mqtt", "grpcListenerMap": "grpc"}
    found = problems(BASE + TWO + f"{key}=internal:{name[key]},bogus:{name[key]},internal\n")
    joined = "\n".join(found)
    assert len(found) == 2, found
    assert "entry 'internal': expected <listener>:" in joined
    assert f"entry 'bogus:{name[key]}': listener 'bogus' is not declared" in joined


def test_no_socket_is_not_concluded_from_entries_that_failed() -> None:
    found = problems(BASE + TWO + NO_LEGACY + "bindAddresses=internal:ftp://127.0.0.1:1\n")
    assert len(found) == 1 and "unknown scheme 'ftp'" in found[0], found


def partial_of(text: str) -> tuple[GatewayConfig | None, frozenset[str]]:
    with pytest.raises(ConfigError) as info:
        load(text)
    return info.value.partial, info.value.keys


def test_a_config_with_problems_keeps_what_validated_for_the_host_checks() -> None:
    partial, keys = partial_of(
        BASE + TWO + TLS + "bindAddresses=internal:pulsar://127.0.0.1:7000,"
        "external:pulsar+ssl://127.0.0.1:7001,ghost:http://127.0.0.1:7002,internal:ftp://x:1\n"
        "brokerServicePort=x\nwebServicePortTls=8443\nmaxMessageSize=1\n"
        "listener.external.tlsKeyFilePath=/own.pem\nlistener.external.tlsKeyStoreType=JKS\n"
    )
    assert partial is not None
    # A failed legacy port opens nothing (not its default); the entries that parse are kept.
    assert [spec.origin for spec in partial.sockets()] == [
        "webServicePort",
        "webServicePortTls",
        "entry 'internal:pulsar://127.0.0.1:7000'",
        "entry 'external:pulsar+ssl://127.0.0.1:7001'",
        "entry 'ghost:http://127.0.0.1:7002'",
    ]
    # A listener's key that failed goes alone: its other keys stay.
    assert partial.tls_for("external").key_file == "/own.pem"
    assert keys == {
        "bindAddresses",
        "brokerServicePort",
        "maxMessageSize",
        "listener.external.tlsKeyStoreType",
    }


def test_a_valid_config_has_no_partial_but_a_line_problem_keeps_the_config() -> None:
    partial, keys = partial_of(BASE + "broken line\n")
    assert partial is not None and keys == frozenset()
    assert [spec.origin for spec in partial.sockets()] == ["brokerServicePort", "webServicePort"]
