"""The series a PromQL expression (or a Grafana query holding one) reads, by name.

Enough of PromQL for our own rules and dashboard: label matchers, ranges, strings and grouping
clauses are dropped, then every identifier left that is not a function, an aggregation or a
keyword is a series name. A selector by `{__name__=...}` alone names nothing here, so the files
checked with this must name their series plainly.
"""

from __future__ import annotations

import re

KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
     "offset", "bool", "inf", "nan", "atan2"}
)  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
# Grafana's template queries: label_values(metric{...}, label) reads `metric` only.
_LABEL_VALUES = re.compile(
    r"label_values\(\s*(?:([A-Za-z_:][A-Za-z0-9_:]*)?\s*(?:\{[^}]*\})?\s*,)?\s*\w+\s*\)"
)


def series_names(expr: str) -> set[str]:
    text = _STRING.sub('""', expr)
    text = _LABEL_VALUES.sub(lambda m: f" {m.group(1) or ''} ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names
