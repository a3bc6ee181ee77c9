"""The gateway side of a recipe in deploy/: the keys its "Gateway side (gateway.conf):" comment
tells an operator to set, as config text, so that tests run the gateway the recipe describes."""

from __future__ import annotations

import re

_BLOCK = re.compile(r"^# Gateway side \(gateway\.conf\):\n((?:#   .*\n)+)", re.MULTILINE)


def gateway_side(text: str) -> str:
    """The keys of the recipe text's "Gateway side" block, one per line, comments dropped;
    AssertionError when the text has no such block."""
    match = _BLOCK.search(text)
    assert match is not None, "the recipe has no 'Gateway side (gateway.conf):' block"
    lines = [line.removeprefix("#   ") for line in match.group(1).splitlines()]
    return "".join(re.sub(r"\s+#.*$", "", line) + "\n" for line in lines)
