"""docs/configuration/keys.md is generated from the config model (listeners/config/reference.py):
the committed page is what the model renders, every key has a meaning, and every key the
config file accepts is on it."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field

from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig, ListenerSettings
from pulsar_lookup_gateway.listeners.config.reference import (
    PAGE,
    REGENERATE,
    default_of,
    render,
    type_of,
)

ROOT = Path(__file__).resolve().parents[3]


def test_the_committed_keys_page_is_what_the_config_model_renders() -> None:
    committed = (ROOT / PAGE).read_text(encoding="utf-8")
    assert committed == render(), (
        f"{PAGE} is out of date with the config model: run `make docs` (or `{REGENERATE}`) "
        "and commit the page"
    )


def test_every_key_of_the_model_is_on_the_page_with_a_meaning() -> None:
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `([^`]+)` \|.*\| ([^|]*) \|$", render(), flags=re.M)
    }
    keys = {f.alias for n, f in GatewayConfig.model_fields.items() if n != "listener_settings"}
    keys |= {f"listener.<name>.{f.alias}" for f in ListenerSettings.model_fields.values()}
    assert set(rows) == keys
    assert all(meaning.strip() for meaning in rows.values())


class _Example(KeyGroup):
    documented: int = Field(3, ge=1)
    """Three at least one."""
    silent: bool = False


def test_a_key_without_a_docstring_has_no_meaning_to_show() -> None:
    fields = _Example.model_fields
    assert fields["documented"].description == "Three at least one."
    assert fields["silent"].description is None
    assert (type_of(fields["documented"]), default_of(fields["documented"])) == (
        "integer (≥ 1)",
        "`3`",
    )
    assert default_of(GatewayConfig.model_fields["metadata_store_url"]) == "required"
