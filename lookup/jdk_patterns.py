r"""The broker's second regex engine: what a topic-list pattern means when RE2J refuses it.

Pulsar's broker compiles a pattern with RE2J and, when RE2J refuses it, with the JDK's
``java.util.regex`` (TopicsPatternFactory, ``RE2J_WITH_JDK_FALLBACK``, the default of
``topicsPatternRegexImplementation``). Two things follow for a pattern RE2 refuses too:

- **invalid** for the JDK as well: the broker's filtering throws, and GET_TOPICS_OF_NAMESPACE
  answers an error (ServerCnx.internalHandleGetTopicsOfNamespace: ``MetadataError`` with the
  exception's text). `jdk_syntax_error` finds the errors it can be sure of (an unclosed or
  unmatched group, an unclosed class, a trailing backslash, ``\C``); anything it is unsure of
  is no error;
- **valid** for the JDK: the broker filters with the JDK's meaning. `translate` rewrites a
  pattern into RE2 syntax *with the JDK's meaning* where it can do so exactly: the JDK's POSIX
  classes (``\p{Lower}``, ``\p{Alpha}``, ... ASCII, as the JDK has them without
  ``UNICODE_CHARACTER_CLASS``), ``\s`` (the JDK's includes ``\x0B``), ``.`` (the JDK's excludes
  every line terminator: ``\n \r \x85 \u2028 \u2029``), ``\e``, and ``$`` as the last
  character. Anything else that may mean something else in the JDK (flags such as ``(?i)``,
  whose folding is ASCII-only there; ``\b``, which changed meaning in JDK 19; look-arounds,
  back-references, nested classes, ``&&``) is not translated: the list is answered unfiltered
  and the client filters it.

Pure text work, linear in the pattern (at most `subscriptionPatternMaxLength` characters).
"""

from __future__ import annotations

__all__ = ["POSIX_CLASSES", "jdk_syntax_error", "translate"]

#: The JDK's POSIX character classes (java.util.regex.Pattern, US-ASCII only), as RE2 class
#: contents.
POSIX_CLASSES = {
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": "\\x00-\\x7F",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": "\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E",
    "Graph": "\\x21-\\x7E",
    "Print": "\\x20-\\x7E",
    "Blank": " \\t",
    "Cntrl": "\\x00-\\x1F\\x7F",
    "XDigit": "0-9a-fA-F",
    "Space": "\\t\\n\\x0B\\f\\r ",
}
_JDK_SPACE = "\\t\\n\\x0B\\f\\r "
# The JDK's `.` without DOTALL: anything but a line terminator.
_JDK_DOT = "[^\\n\\r\\x{85}\\x{2028}\\x{2029}]"
# Escapes that mean the same in the JDK and in RE2 (outside and inside a class).
_SAME_ESCAPES = frozenset("dDwWtnrfa")
_SAME_OUTSIDE = frozenset("Az")


class _Untranslatable(Exception):
    pass


def _literal(char: str) -> str:
    """`char` as an RE2 literal (inside or outside a class)."""
    return char if char.isalnum() or char == "_" or ord(char) > 0x7F else f"\\x{{{ord(char):x}}}"


def _quoted(pattern: str, start: int) -> tuple[str, int]:
    r"""The literal text of a ``\Q...\E`` opened before `start`, and the index after it."""
    end = pattern.find("\\E", start)
    text = pattern[start:] if end < 0 else pattern[start:end]
    return "".join(_literal(c) for c in text), len(pattern) if end < 0 else end + 2


def _posix(pattern: str, index: int) -> tuple[str, int]:
    r"""The contents of the POSIX class ``\p{Name}`` whose name starts at `index` (after
    ``\p``), and the index after it."""
    if index >= len(pattern) or pattern[index] != "{":
        raise _Untranslatable
    end = pattern.find("}", index)
    contents = POSIX_CLASSES.get(pattern[index + 1 : end]) if end > 0 else None
    if contents is None:
        raise _Untranslatable
    return contents, end + 1


def _hex(pattern: str, index: int) -> tuple[str, int]:
    r"""``\x`` followed by ``{h...}`` or two hex digits (at `index`), copied; the index after."""
    if pattern.startswith("{", index):
        end = pattern.find("}", index)
        if end < 0:
            raise _Untranslatable
        return "\\x" + pattern[index : end + 1], end + 1
    return "\\x" + pattern[index : index + 2], index + 2


def _class(pattern: str, index: int) -> tuple[str, int]:
    """The JDK class opened just before `index`, in RE2 syntax; the index after its `]`."""
    out = ["["]
    if pattern.startswith("^", index):
        out.append("^")
        index += 1
    first = True
    while index < len(pattern):
        char = pattern[index]
        if char == "]" and not first:
            return "".join(out) + "]", index + 1
        if char == "[" or pattern.startswith("&&", index):
            raise _Untranslatable  # the JDK's union and intersection
        if char == "\\":
            index += 1
            escape = pattern[index] if index < len(pattern) else ""
            if escape == "p":
                contents, index = _posix(pattern, index + 1)
                out.append(contents)
            elif escape == "Q":
                text, index = _quoted(pattern, index + 1)
                out.append(text)
            elif escape == "x":
                text, index = _hex(pattern, index + 1)
                out.append(text)
            else:
                out.append(_escape_in_class(escape))
                index += 1
        else:
            out.append("\\]" if char == "]" else _class_char(char))
            index += 1
        first = False
    raise _Untranslatable  # unclosed


def _class_char(char: str) -> str:
    # '-' keeps its range meaning (the same in both); RE2's own `[:` is made literal.
    return char if char not in "[:" else f"\\x{{{ord(char):x}}}"


def _escape_in_class(escape: str) -> str:
    if escape in _SAME_ESCAPES:
        return "\\" + escape
    if escape == "s":
        return _JDK_SPACE
    if escape == "e":
        return "\\x1B"
    if escape and not escape.isalnum() and escape.isascii():
        return "\\" + escape
    raise _Untranslatable


def _escape_outside(pattern: str, index: int) -> tuple[str, int]:
    r"""The escape whose letter is at `index` (after ``\``), and the index after it."""
    escape = pattern[index] if index < len(pattern) else ""
    if escape in ("p", "P"):
        contents, after = _posix(pattern, index + 1)
        return ("[^" if escape == "P" else "[") + contents + "]", after
    if escape == "Q":
        return _quoted(pattern, index + 1)
    if escape == "x":
        return _hex(pattern, index + 1)
    if escape in _SAME_ESCAPES or escape in _SAME_OUTSIDE:
        return "\\" + escape, index + 1
    if escape == "s":
        return f"[{_JDK_SPACE}]", index + 1
    if escape == "S":
        return f"[^{_JDK_SPACE}]", index + 1
    if escape == "e":
        return "\\x1B", index + 1
    if escape and not escape.isalnum() and escape.isascii():
        return "\\" + escape, index + 1
    raise _Untranslatable


def _repetition_end(pattern: str, index: int) -> int:
    """The index after the repetition `{n}`, `{n,}` or `{n,m}` at `index`, or -1."""
    digits = 0
    comma = False
    for end in range(index + 1, len(pattern)):
        char = pattern[end]
        if char.isascii() and char.isdigit():
            digits += 1
        elif char == "," and not comma and digits:
            comma = True
        elif char == "}" and digits:
            return end + 1
        else:
            return -1
    return -1


def translate(pattern: str) -> str | None:
    """`pattern` (a JDK regex) in RE2 syntax with the JDK's meaning for a whole-name match, or
    None when that cannot be done exactly (see the module's rules)."""
    out: list[str] = []
    index = 0
    try:
        while index < len(pattern):
            char = pattern[index]
            if char == "\\":
                text, index = _escape_outside(pattern, index + 1)
            elif char == "[":
                text, index = _class(pattern, index + 1)
            elif char == ".":
                text, index = _JDK_DOT, index + 1
            elif char == "$":
                if index != len(pattern) - 1:
                    return None  # before a final line terminator, in the JDK
                text, index = "$", index + 1
            elif char == "{":
                end = _repetition_end(pattern, index)
                if end < 0:
                    return None  # the JDK refuses a `{` that is no repetition; RE2 reads it
                text, index = pattern[index:end], end
            elif char == "(" and pattern.startswith("(?", index):
                if not pattern.startswith("(?:", index):
                    return None  # flags, look-arounds, named and atomic groups
                text, index = "(?:", index + 3
            else:
                text, index = char, index + 1
            out.append(text)
    except _Untranslatable:
        return None
    return "".join(out)


def jdk_syntax_error(pattern: str) -> str | None:
    r"""The JDK's PatternSyntaxException description for `pattern` where it is certain, else
    None: an unmatched ``)``, an unclosed group or class, a trailing backslash, ``\C``. The
    comments flag (``(?x)``, where ``#`` starts a comment) makes it unsure: None."""
    if "(?" in pattern and "x" in pattern:
        return None
    groups = 0
    classes = 0
    class_empty = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            if index + 1 >= len(pattern):
                return f"Unexpected internal error near index {index + 1}"
            escape = pattern[index + 1]
            if escape == "Q":
                end = pattern.find("\\E", index + 2)
                if end < 0:
                    break  # quoted to the end
                index = end + 2
                class_empty = False
                continue
            if escape == "C":
                return f"Illegal/unsupported escape sequence near index {index + 1}"
            index += 2
            class_empty = False
            continue
        if classes:
            if char == "[":
                classes += 1
                class_empty = True
            elif char == "]" and not class_empty:
                classes -= 1
            else:
                class_empty = False
            if char == "^" and pattern[index - 1] == "[":
                class_empty = True
        elif char == "[":
            classes, class_empty = 1, True
        elif char == "(":
            groups += 1
        elif char == ")":
            if not groups:
                return f"Unmatched closing ')' near index {index - 1}"
            groups -= 1
        index += 1
    if classes:
        return f"Unclosed character class near index {len(pattern) - 1}"
    if groups:
        return f"Unclosed group near index {len(pattern)}"
    return None
