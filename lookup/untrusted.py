"""Text that came from a client, made safe to echo in an error or write to a log line.

A client chooses topic names, listener names, headers and tokens: echoed verbatim they could
forge log lines (CR/LF, ANSI escapes) or make every error the size of the input.
"""

from __future__ import annotations

ECHO_LIMIT = 256  # characters of client text kept in a message; the rest is summarised


def printable(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` with control and other non-printing characters escaped (`\\n`, `\\x1b`, ...)
    and cut to `limit` characters, saying how much was cut."""
    cut = text[:limit]
    if not cut.isprintable():
        cut = "".join(c if c.isprintable() else _escape(c) for c in cut)
    if len(text) > limit:
        cut += f"...({len(text) - limit} more characters)"
    return cut


def _escape(char: str) -> str:
    escaped = repr(char)[1:-1]  # \n, \t, \x1b, \u2028 ...
    return escaped if escaped != char else f"\\u{ord(char):04x}"
