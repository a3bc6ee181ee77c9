"""Keys the gateway does not use: which are refused and which only warned of.

A key the gateway does not know is most often another broker.conf key (the gateway reads a
broker's file as it is), so it is a warning. Two kinds are errors, as the gateway would run with
a default the operator did not mean: a key one edit from a gateway key (`bindAdresses` leaves
`bindAddresses` unset and opens untagged 0.0.0.0 sockets), and a per-listener key the listener
settings do not have (`listener.<name>.<key>` is the gateway's own syntax). `strict` (for CI)
makes every unknown key an error."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from pulsar_lookup_gateway.listeners.config.conf_file import RawConfig, closest_key, edits

#: A key this many edits (case ignored) from a gateway key is refused as a misspelling.
TYPO_EDITS = 1


@dataclass
class KeySorting:
    """What the keys of a file are: the top-level values, the per-listener values by listener,
    and the problems (where, message, key) and warnings of keys the gateway does not use."""

    values: dict[str, str] = field(default_factory=dict)
    per_listener: dict[str, dict[str, str]] = field(default_factory=dict)
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def sort_keys(
    raw: RawConfig,
    *,
    known: Collection[str],
    listener_keys: Collection[str],
    retired: Mapping[str, str],
    prefix: str,
    strict: bool = False,
) -> KeySorting:
    """Split `raw`'s keys into the values to validate and the problems and warnings of the
    keys the gateway does not use (`known`: the top-level keys, `listener_keys`: the keys of
    `<prefix><name>.`, `retired`: keys that no longer do anything, with why)."""
    sorting = KeySorting()
    for key, value in raw.values.items():
        where = f"{key} ({raw.sources.get(key, '?')})"
        if key in known:
            sorting.values[key] = value
            continue
        if key.startswith(prefix):
            name, dot, setting = key.removeprefix(prefix).partition(".")
            if not (dot and name and setting):
                sorting.problems.append(
                    (where, f"expected {prefix}<name>.<key> (a listener's own setting)", key)
                )
            elif setting in listener_keys:
                sorting.per_listener.setdefault(name, {})[setting] = value
            else:
                sorting.problems.append(
                    (where, "not a per-listener key" + _did_you_mean(setting, listener_keys), key)
                )
            continue
        near = closest_key(key, known)
        if key not in retired and near is not None and edits(key, near) <= TYPO_EDITS:
            sorting.problems.append(
                (
                    where,
                    f"not a key the gateway uses, one edit from '{near}': a misspelt key would "
                    f"leave {near} at its default; did you mean '{near}'?",
                    key,
                )
            )
        elif strict:
            why = retired.get(key, "not a key the gateway uses" + _did_you_mean(key, known))
            sorting.problems.append((where, f"{why} (--strict refuses every unused key)", key))
        elif key in retired:
            sorting.warnings.append(f"{where}: {retired[key]}; ignored")
        else:
            sorting.warnings.append(
                f"{where}: not a key the gateway uses; ignored" + _did_you_mean(key, known)
            )
    sorting.warnings.sort()
    return sorting


def _did_you_mean(key: str, known: Collection[str]) -> str:
    near = closest_key(key, known)
    return f"; did you mean '{near}'?" if near else ""
