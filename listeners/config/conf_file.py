"""Read Pulsar's broker.conf syntax (Java properties) and apply environment overrides."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ENV_PREFIX = "PULSAR_GATEWAY_"
#: PULSAR_GATEWAY_<name> variables that set the process, not the config (the log level).
NOT_CONFIG_KEYS = frozenset({"LOG_LEVEL"})


@dataclass
class RawConfig:
    values: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # key -> "file:line" or env var name
    problems: list[tuple[str, str]] = field(default_factory=list)  # (where, message)


def parse_properties(text: str, origin: str) -> RawConfig:
    """`key=value` lines; `#`/`!` comments, blank lines, `\\` continuations; later keys win.

    `key: value` is accepted too, as Java's Properties does.
    """
    raw = RawConfig()
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        number = index + 1
        line = lines[index].strip()
        index += 1
        while line.endswith("\\") and not line.endswith("\\\\") and index < len(lines):
            line = line[:-1] + lines[index].strip()
            index += 1
        if not line or line[0] in "#!":
            continue
        eq, colon = line.find("="), line.find(":")
        cut = min(p for p in (eq, colon) if p >= 0) if max(eq, colon) >= 0 else -1
        if cut <= 0:
            raw.problems.append((f"{origin}:{number}", f"expected key=value, got '{line}'"))
            continue
        key, value = line[:cut].strip(), line[cut + 1 :].strip()
        raw.values[key] = value
        raw.sources[key] = f"{origin}:{number}"
    return raw


def read_config_file(path: Path, env: Mapping[str, str]) -> RawConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raw = RawConfig()
        raw.problems.append((str(path), f"cannot read the config file: {exc}"))
        return raw
    raw = parse_properties(text, str(path))
    apply_env(raw, env)
    return raw


def apply_env(raw: RawConfig, env: Mapping[str, str]) -> None:
    """`PULSAR_GATEWAY_<key>` overrides `<key>`, with the key spelled as in the file (but for
    NOT_CONFIG_KEYS)."""
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            key = name[len(ENV_PREFIX) :]
            if key in NOT_CONFIG_KEYS:
                continue
            raw.values[key] = value.strip()
            raw.sources[key] = name


#: Keys longer than this get no suggestion: the distance costs len(a) * len(b) steps.
_SUGGEST_MAX_LEN = 100
_SUGGEST_MAX_DISTANCE = 2


def closest_key(key: str, known: Iterable[str]) -> str | None:
    """The known key `key` most likely misspells (edit distance <= 2, case ignored), if any."""
    if len(key) > _SUGGEST_MAX_LEN:
        return None
    typed = key.lower()
    scored = [
        (distance, name)
        for name in known
        if (distance := _distance(typed, name.lower(), _SUGGEST_MAX_DISTANCE)) is not None
    ]
    return min(scored)[1] if scored else None


def edits(a: str, b: str) -> int:
    """How many edits (case ignored) part `a` and `b`, counted up to 3 (3: three or more)."""
    distance = _distance(a.lower(), b.lower(), _SUGGEST_MAX_DISTANCE)
    return _SUGGEST_MAX_DISTANCE + 1 if distance is None else distance


def _distance(a: str, b: str, limit: int) -> int | None:
    """Levenshtein distance of `a` and `b` if it is at most `limit`, else None. Stops as soon
    as a whole row exceeds the limit: most unknown keys are nowhere near any known one."""
    if abs(len(a) - len(b)) > limit:
        return None
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        current = [i]
        for j, other in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char != other))
            )
        if min(current) > limit:
            return None
        previous = current
    return previous[-1] if previous[-1] <= limit else None
