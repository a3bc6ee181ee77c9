"""The configuration keys page, docs/configuration/keys.md, generated from the config model: each
key's name, type and default from its pydantic field, its meaning from the field's docstring (the
key groups set `use_attribute_docstrings`), so the page cannot say what the code does not.

    python -m pulsar_lookup_gateway.listeners.config.reference          # rewrite the page
    python -m pulsar_lookup_gateway.listeners.config.reference --check  # exit 1 if out of date

`make docs` runs it; tests/unit/listeners/test_config_reference.py fails when the committed page
differs from what this renders.
"""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from pulsar_lookup_gateway.listeners.config.listener_settings import LISTENER_PREFIX
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig, ListenerSettings
from pulsar_lookup_gateway.listeners.endpoints.addresses import AdvertisedListener, BindAddress
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl

#: Where the page lives, from the repository's root.
PAGE = Path("docs/configuration/keys.md")
REGENERATE = "python -m pulsar_lookup_gateway.listeners.config.reference"
#: A section title per key group (a group missing here is titled by its class name).
TITLES = {
    "StoreKeys": "Cluster metadata",
    "SocketKeys": "Legacy sockets",
    "TlsKeys": "TLS",
    "ListenerKeys": "Listeners and client location",
    "LimitKeys": "Limits and timeouts",
    "AccessKeys": "Authentication and authorization",
    "TopicKeys": "Topic auto-creation and topic lists",
    "BrokerLinkKeys": "The broker link",
    "ProtocolHandlerKeys": "Protocol handlers",
}
#: Fields that are not keys of their own (`listener.<name>.<key>` has its own section).
NOT_KEYS = frozenset({"listener_settings"})
HEADER = f"""\
# Configuration keys

<!-- Generated from the config model (listeners/config/*_keys.py, listener_settings.py) by
`{REGENERATE}`; `make docs` regenerates it. Edit the fields' docstrings, not this page. -->

Every key the gateway reads, in the order of the groups of the config model (see
[Configuration](index.md) for the file's syntax, the environment overrides and the rules between
keys). A key of the file is written `key=value`; a list is comma-separated; an empty value is the
same as an unset key. "unset" means no value: the meaning says what then happens.
"""


def render() -> str:
    """The page; ValueError names every key that has no docstring."""
    groups = [base for base in reversed(GatewayConfig.__bases__) if issubclass(base, BaseModel)]
    fields = GatewayConfig.model_fields
    placed: set[str] = set()
    lines = [HEADER]
    missing: list[str] = []
    for group in groups:
        names = [n for n in vars(group).get("__annotations__", {}) if n in fields]
        names = [n for n in names if n not in NOT_KEYS]
        if names:
            lines += _section(
                TITLES.get(group.__name__, group.__name__), "", names, fields, missing
            )
        placed.update(names)
    rest = [n for n in fields if n not in placed and n not in NOT_KEYS]
    if rest:
        lines += _section("Other keys", "", rest, fields, missing)
    intro = (
        f"Written `{LISTENER_PREFIX}<name>.<key>=value`: one listener's own setting (`<name>` "
        "is declared in `advertisedListeners`). A TLS key unset here falls back to the global "
        "key of the same name."
    )
    per_listener = ListenerSettings.model_fields
    lines += _section(
        f"Per listener: `{LISTENER_PREFIX}<name>.<key>`",
        intro,
        list(per_listener),
        per_listener,
        missing,
        prefix=f"{LISTENER_PREFIX}<name>.",
    )
    if missing:
        raise ValueError(f"keys without a docstring (their meaning): {', '.join(missing)}")
    return "\n".join(lines)


def _section(
    title: str,
    intro: str,
    names: Sequence[str],
    fields: dict[str, FieldInfo],
    missing: list[str],
    prefix: str = "",
) -> list[str]:
    lines = [f"## {title}", ""]
    if intro:
        lines += [intro, ""]
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name in names:
        field = fields[name]
        key = prefix + (field.alias or name)
        if not field.description:
            missing.append(key)
        meaning = " ".join((field.description or "").split())
        cells = [f"`{key}`", type_of(field), default_of(field), meaning]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    lines.append("")
    return lines


def type_of(field: FieldInfo) -> str:
    """A key's type as a reader of the config file sees it."""
    annotation = _without_none(field.annotation)
    bounds = list(field.metadata)
    if get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        for item in extra:
            bounds += item.metadata if isinstance(item, FieldInfo) else [item]
    name = _type_name(annotation)
    limits = [limit for limit in map(_bound, bounds) if limit]
    return f"{name} ({', '.join(limits)})" if limits else name


def default_of(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if value is PydanticUndefined or value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Enum):
        return f"`{value.value}`"
    if isinstance(value, tuple):
        return f"`{','.join(map(str, value))}`" if value else "empty"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _type_name(annotation: Any) -> str:
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if annotation in simple:
        return simple[annotation]
    if annotation is SecretStr:
        return "string (secret)"
    if annotation is MetadataUrl:
        return "metadata URL"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " or ".join(f"`{member.value}`" for member in annotation)
    if get_origin(annotation) is tuple:
        item = get_args(annotation)[0]
        if item is str:
            return "list"
        if item in (AdvertisedListener, BindAddress):
            return "list of `name:scheme://host:port`"
        if get_origin(item) is tuple:
            return "list of `a:b` pairs"
    return getattr(annotation, "__name__", str(annotation))


def _bound(item: Any) -> str:
    if isinstance(item, annotated_types.Ge):
        return f"≥ {item.ge}"
    if isinstance(item, annotated_types.Gt):
        return f"> {item.gt}"
    if isinstance(item, annotated_types.Le):
        return f"≤ {item.le}"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=PAGE, help=f"the page (default: {PAGE})")
    parser.add_argument(
        "--check", action="store_true", help="only compare; exit 1 when the page is out of date"
    )
    args = parser.parse_args(argv)
    page = render()
    current = args.out.read_text(encoding="utf-8") if args.out.exists() else None
    if args.check:
        if current != page:
            print(f"{args.out} is out of date: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    if current != page:
        args.out.write_text(page, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
