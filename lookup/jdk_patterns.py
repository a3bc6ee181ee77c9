r"""The broker's second regex engine: what a topic-list pattern means when RE2J refuses it.

Pulsar's broker compiles a pattern with RE2J and, when RE2J refuses it, with the JDK's
``java.util.regex`` (TopicsPatternFactory, ``RE2J_WITH_JDK_FALLBACK``, the default of
``topicsPatternRegexImplementation``). `jdk_compile` follows the JDK's parser (JDK 17's
``Pattern``: its ``\Q...\E`` rewriting, then its recursive descent, cursor for cursor) and says
what the JDK makes of a pattern:

- `JdkError`: the JDK refuses it, with its description and index (the index is in the JDK's
  rewritten pattern, as the JDK counts it). The broker's filtering throws, and
  GET_TOPICS_OF_NAMESPACE answers ``MetadataError`` with that text;
- `Translated`: the JDK compiles it, and here it is in RE2 syntax *with the JDK's meaning* for a
  whole-name match: every character set (``[...]`` with its ranges, nesting, ``&&`` and ``^``;
  ``\d \w \s \h \v`` and their complements; the US-ASCII POSIX classes ``\p{Lower}`` ...) is
  computed as the JDK computes it and written out as code-point ranges; ``.`` excludes every
  line terminator; ``$`` is translated where it can only match at the end;
- `Untranslatable`: the JDK compiles it (as far as the walk got, without an error) but RE2 has
  no exact equivalent: inline flags (the JDK's ``(?i)`` folds ASCII only), ``\b`` (its meaning
  changed in JDK 19), look-arounds, back-references, possessive repetition, Unicode properties;
- `Unsure`: the walk met what it does not model (the comments flag ``(?x)``, which changes the
  grammar; a look-behind, whose length the JDK checks; ``\N{...}`` and property names beyond a
  known list, which the JDK may refuse). Nothing after that point is judged.

The JDK reports the first error its parser meets; so does the walk, which stops with `Unsure`
at the first construct it does not model: an error is answered only where it is the JDK's
first. `escapes` is the one reading of the escape grammar (``\`` pairs after the ``\Q...\E``
rewriting) that topic_list also uses to find RE2's ``\C``.

Pure text work, linear in the pattern, recursion bounded by `MAX_DEPTH`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "MAX_DEPTH",
    "POSIX_CLASSES",
    "JdkError",
    "Translated",
    "Unsure",
    "Untranslatable",
    "escapes",
    "jdk_compile",
    "remove_quoting",
]

#: Groups and classes nested deeper than this are not judged (Unsure): the walk recurses.
MAX_DEPTH = 100
_MAX_CODE_POINT = 0x10FFFF
_INT_MAX = 0x7FFFFFFF

Ranges = tuple[tuple[int, int], ...]


def _ranges(*spans: tuple[int, int] | int) -> Ranges:
    return _union(tuple((s, s) if isinstance(s, int) else s for s in spans))


def _union(*sets: Ranges) -> Ranges:
    spans = sorted(span for ranges in sets for span in ranges)
    merged: list[tuple[int, int]] = []
    for low, high in spans:
        if merged and low <= merged[-1][1] + 1:
            if high > merged[-1][1]:
                merged[-1] = (merged[-1][0], high)
        else:
            merged.append((low, high))
    return tuple(merged)


def _negate(ranges: Ranges) -> Ranges:
    out = []
    start = 0
    for low, high in ranges:
        if low > start:
            out.append((start, low - 1))
        start = high + 1
    if start <= _MAX_CODE_POINT:
        out.append((start, _MAX_CODE_POINT))
    return tuple(out)


def _intersect(left: Ranges, right: Ranges) -> Ranges:
    return _negate(_union(_negate(left), _negate(right)))


_DIGIT = _ranges((0x30, 0x39))
_LOWER = _ranges((0x61, 0x7A))
_UPPER = _ranges((0x41, 0x5A))
_ALPHA = _union(_LOWER, _UPPER)
_ALNUM = _union(_ALPHA, _DIGIT)
_PUNCT = _ranges((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E))
#: The JDK's POSIX character classes (java.util.regex.Pattern, US-ASCII only).
POSIX_CLASSES: dict[str, Ranges] = {
    "Lower": _LOWER,
    "Upper": _UPPER,
    "ASCII": _ranges((0, 0x7F)),
    "Alpha": _ALPHA,
    "Digit": _DIGIT,
    "Alnum": _ALNUM,
    "Punct": _PUNCT,
    "Graph": _union(_ALNUM, _PUNCT),
    "Print": _union(_ALNUM, _PUNCT, _ranges(0x20)),
    "Blank": _ranges(0x20, 0x09),
    "Cntrl": _ranges((0, 0x1F), 0x7F),
    "XDigit": _ranges((0x30, 0x39), (0x61, 0x66), (0x41, 0x46)),
    "Space": _ranges((0x09, 0x0D), 0x20),
}
# Property names JDK 17 knows whose sets RE2 cannot give with the JDK's tables (valid,
# untranslatable): general categories and the java* properties.
_OTHER_PROPERTY_NAMES = (
    "Cn Lu Ll Lt Lm Lo Mn Me Mc Nd Nl No Zs Zl Zp Cc Cf Co Cs Pd Ps Pe Pc Po Sm Sc Sk So Pi Pf "
    "L M N Z C P S LC LD L1 all javaLowerCase javaUpperCase javaAlphabetic javaIdeographic "
    "javaTitleCase javaDigit javaDefined javaLetter javaLetterOrDigit javaJavaIdentifierStart "
    "javaJavaIdentifierPart javaUnicodeIdentifierStart javaUnicodeIdentifierPart "
    "javaIdentifierIgnorable javaSpaceChar javaWhitespace javaISOControl javaMirrored"
)
_OTHER_PROPERTIES = frozenset(_OTHER_PROPERTY_NAMES.split())
# The JDK's predefined classes without UNICODE_CHARACTER_CLASS (its javadoc).
_PREDEFINED: dict[str, Ranges] = {
    "d": _DIGIT,
    "w": _union(_ALNUM, _ranges(0x5F)),
    "s": POSIX_CLASSES["Space"],
    "h": _ranges(0x20, 0x09, 0xA0, 0x1680, 0x180E, (0x2000, 0x200A), 0x202F, 0x205F, 0x3000),
    "v": _ranges((0x0A, 0x0D), 0x85, 0x2028, 0x2029),
}
_LINE_TERMINATORS = _ranges(0x0A, 0x0D, 0x85, 0x2028, 0x2029)
# escape() letters that are an error (in a class, and some outside one too).
_BAD_ESCAPES = frozenset("CEFIJKLMOPQTUYgijlmopqy")
_OUTSIDE_ONLY = frozenset("123456789ABGRXZbkz")


@dataclass(frozen=True, slots=True)
class JdkError:
    """The JDK's PatternSyntaxException: its description and index."""

    description: str
    index: int

    @property
    def message(self) -> str:
        return f"{self.description} near index {self.index}"


@dataclass(frozen=True, slots=True)
class Translated:
    """The JDK compiles the pattern; `regex` is its meaning in RE2 syntax (a whole match)."""

    regex: str


@dataclass(frozen=True, slots=True)
class Untranslatable:
    """The JDK compiles the pattern; RE2 cannot give its meaning exactly."""

    reason: str


@dataclass(frozen=True, slots=True)
class Unsure:
    """The walk met a construct it does not model: whether the JDK compiles it is not known."""

    reason: str


def remove_quoting(pattern: str) -> str:
    r"""The JDK's RemoveQEQuoting: ``\Q...\E`` replaced by escaped characters, as the JDK's
    parser reads the pattern (and counts its error indexes)."""
    start = 0
    while start < len(pattern) - 1:
        if pattern[start] != "\\":
            start += 1
        elif pattern[start + 1] != "Q":
            start += 2
        else:
            break
    if start >= len(pattern) - 1:
        return pattern
    out = [pattern[:start]]
    index = start + 2
    in_quote = begin_quote = True
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if not char.isascii() or char.isalpha():
            out.append(char)
        elif char.isdigit():
            out.append("\\x3" + char if begin_quote else char)
        elif char != "\\":
            out.append("\\" + char if in_quote else char)
        elif in_quote:
            if pattern.startswith("E", index):
                index += 1
                in_quote = False
            else:
                out.append("\\\\")
        elif pattern.startswith("Q", index):
            index += 1
            in_quote = begin_quote = True
            continue
        else:
            out.append(pattern[index - 1 : index + 1])
            index += 1
        begin_quote = False
    return "".join(out)


def escapes(pattern: str) -> Iterator[str]:
    r"""The letter of each escape of `pattern` (``\`` and the character after it), in order,
    read after the ``\Q...\E`` rewriting: quoted text has none."""
    text = remove_quoting(pattern)
    index = text.find("\\")
    while 0 <= index < len(text) - 1:
        yield text[index + 1]
        index = text.find("\\", index + 2)


class _Error(Exception):
    def __init__(self, description: str) -> None:
        self.description = description


class _Unsure(Exception):
    pass


class _BitClass:
    """The JDK's BitClass: a mutable set of Latin-1 characters. A union or intersection that
    took it keeps reading it (a lambda over the object): its later additions count there too,
    which the translation does not follow (it gives up then)."""

    def __init__(self) -> None:
        self.chars: set[int] = set()
        self.captured = False

    def add(self, parser: _Parser, char: int) -> None:
        if self.captured:
            parser.untranslatable("a character class the JDK builds by aliasing")
        self.chars.add(char)

    def ranges(self) -> Ranges:
        self.captured = True
        return _ranges(*self.chars)


# A character predicate: its code points as ranges, or None when only the JDK knows them.
_Predicate = Ranges | None
# The same, or False where the JDK has null (in a class: nothing yet, or "went into the bits").
_Slot = Ranges | None | Literal[False]


class _Parser:
    """JDK 17's Pattern parser (compile, expr, sequence, atom, closure, group0, clazz, range,
    escape ...), following its cursor over the rewritten pattern, building the RE2 text."""

    # One class past 300 lines on purpose: one grammar whose rules recurse into each other over
    # one cursor (group0 into expr, clazz into range into escape), rule for rule the JDK's class.

    def __init__(self, pattern: str) -> None:
        self.temp = [ord(c) for c in remove_quoting(pattern)]
        self.length = len(self.temp)
        self.temp += [0, 0]  # the JDK's double zero termination
        self.cursor = 0
        self.depth = 0
        self.flags = ""
        self.groups = 1  # capturingGroupCount
        self.names: set[str] = set()
        self.reason: str | None = None

    # --- reading, as the JDK reads ----------------------------------------------------------

    def at(self, index: int) -> int:
        if index >= len(self.temp):
            raise _Unsure("read past the pattern")  # the JDK's ArrayIndexOutOfBounds
        return self.temp[index]

    def peek(self) -> int:
        return self.at(self.cursor)

    def read(self) -> int:
        char = self.at(self.cursor)
        self.cursor += 1
        return char

    def next(self) -> int:
        self.cursor += 1
        return self.at(self.cursor)

    def skip(self) -> int:
        char = self.at(self.cursor + 1)
        self.cursor += 2
        return char

    def unread(self) -> None:
        self.cursor -= 1

    def untranslatable(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Unsure("nested too deep")

    # --- the grammar ------------------------------------------------------------------------

    def compile(self) -> str:
        regex = self.expr()
        if self.cursor != self.length:
            if self.peek() == ord(")"):
                raise _Error("Unmatched closing ')'")
            raise _Error("Unexpected internal error")
        return regex

    def expr(self) -> str:
        branches = [self.sequence()]
        while self.peek() == ord("|"):
            self.next()
            branches.append(self.sequence())
        return "|".join(branches)

    def sequence(self) -> str:
        nodes: list[str] = []
        while True:
            char = self.peek()
            if char == ord("("):
                group = self.group0()
                if group is not None:
                    nodes.append(group)
                continue
            if char == ord("["):
                node = _class_text(self.clazz(consume=True))
            elif char == ord("\\"):
                char = self.next()
                if char in (ord("p"), ord("P")):
                    node = _class_text(self.family_after_p(char))
                else:
                    self.unread()
                    node = self.atom()
            elif char == ord("^"):
                self.next()
                node = "^"
            elif char == ord("$"):
                self.next()
                # The JDK's $ matches before a final line terminator too: only where the whole
                # match must end next (at the top level, before `|` or the end) is it RE2's $.
                ends = self.peek() == ord("|") or (self.peek() == 0 and self.cursor >= self.length)
                if self.depth or not ends:
                    self.untranslatable("$ before the end")
                node = "$"
            elif char == ord("."):
                self.next()
                node = _class_text(_negate(_LINE_TERMINATORS))
            elif char in (ord("|"), ord(")")):
                break
            elif char in (ord("?"), ord("*"), ord("+")):
                self.next()
                raise _Error(f"Dangling meta character '{chr(char)}'")
            elif char == 0 and self.cursor >= self.length:
                break
            else:
                node = self.atom()
            nodes.append(self.closure(node))
        return "".join(nodes)

    def atom(self) -> str:
        """One literal character (or escape) at a time: the JDK's slice ends before a
        repetition's operand, so that each character is its own node makes no difference."""
        char = self.peek()
        if char in (ord("*"), ord("+"), ord("?"), ord("{")):
            return "(?:)"  # an empty slice: `{` with nothing before it
        if char == ord("\\"):
            value = self.escape(in_class=False, is_range=False)
            if isinstance(value, str):
                return value
            return _literal(value)
        self.next()
        return _literal(char)

    def closure(self, node: str) -> str:
        char = self.peek()
        if char == ord("?"):
            return f"(?:{node})?{self.qtype()}"
        if char == ord("*"):
            return f"(?:{node})*{self.qtype()}"
        if char == ord("+"):
            return f"(?:{node})+{self.qtype()}"
        if char != ord("{"):
            return node
        char = self.skip()
        if not (0x30 <= char <= 0x39):
            raise _Error("Illegal repetition")
        low = 0
        while True:
            low = low * 10 + char - 0x30
            if low > _INT_MAX:
                raise _Error("Illegal repetition range")
            char = self.read()
            if not (0x30 <= char <= 0x39):
                break
        high = low
        if char == ord(","):
            char = self.read()
            if char == ord("}"):
                self.unread()
                return f"(?:{node}){{{low},}}{self.qtype()}"
            high = 0
            while 0x30 <= char <= 0x39:
                high = high * 10 + char - 0x30
                if high > _INT_MAX:
                    raise _Error("Illegal repetition range")
                char = self.read()
        if char != ord("}"):
            raise _Error("Unclosed counted closure")
        if high < low:
            raise _Error("Illegal repetition range")
        self.unread()
        count = f"{low}" if high == low else f"{low},{high}"
        return f"(?:{node}){{{count}}}{self.qtype()}"

    def qtype(self) -> str:
        char = self.next()
        if char == ord("?"):
            self.next()
            return "?"
        if char == ord("+"):
            self.next()
            self.untranslatable("possessive repetition")
        return ""

    def group0(self) -> str | None:
        self.deeper()
        saved = self.flags
        char = self.next()
        if char != ord("?"):
            self.groups += 1
            body = self.expr()
        else:
            char = self.skip()
            if char == ord(":"):
                body = self.expr()
            elif char in (ord("="), ord("!"), ord(">")):
                self.untranslatable("a look-ahead or an atomic group")
                body = self.expr()
            elif char == ord("<"):
                char = self.read()
                if char in (ord("="), ord("!")):
                    raise _Unsure("a look-behind (the JDK checks its length)")
                name = self.groupname(char)
                if name in self.names:
                    raise _Error(f"Named capturing group <{name}> is already defined")
                self.groups += 1
                self.names.add(name)
                body = self.expr()
            elif char in (ord("$"), ord("@")):
                raise _Error("Unknown group type")
            else:
                self.unread()
                self.add_flags()
                char = self.read()
                if char == ord(")"):
                    self.depth -= 1
                    return None  # flags for the rest of the enclosing group
                if char != ord(":"):
                    raise _Error("Unknown inline modifier")
                body = self.expr()
        if self.read() != ord(")"):
            raise _Error("Unclosed group")
        self.flags = saved
        self.depth -= 1
        return self.closure(f"(?:{body})")

    def add_flags(self) -> None:
        char = self.peek()
        while chr(char) in "imsducxU":
            self.flags += chr(char)
            char = self.next()
        if char == ord("-"):
            char = self.next()
            while chr(char) in "imsducxU":
                self.flags = self.flags.replace(chr(char), "")
                char = self.next()
        if "x" in self.flags:
            raise _Unsure("the comments flag (?x)")
        if self.flags:
            self.untranslatable("inline flags")

    def groupname(self, char: int) -> str:
        if not (chr(char).isascii() and chr(char).isalpha()):
            raise _Error("capturing group name does not start with a Latin letter")
        name = ""
        while True:
            name += chr(char)
            char = self.read()
            if not (chr(char).isascii() and chr(char).isalnum()):
                break
        if char != ord(">"):
            raise _Error("named capturing group is missing trailing '>'")
        return name

    def escape(self, *, in_class: bool, is_range: bool, create: bool = True) -> int | str:
        """The JDK's escape(): a character (int), or outside a class the RE2 text of a node
        (str). In a class, a predicate is left in `self.predicate`."""
        char = self.skip()
        letter = chr(char)
        self.predicate: _Predicate = None
        if letter == "0":
            return self.octal()
        if letter in _BAD_ESCAPES or (in_class and letter in _OUTSIDE_ONLY):
            raise _Error("Illegal/unsupported escape sequence")
        if letter in "123456789":
            if create:
                self.backref()
            self.untranslatable("a back-reference")
            return "(?:)"
        if letter in "dwshvDWSHV":
            if letter == "v" and is_range:
                return 0x0B
            ranges = _PREDEFINED[letter.lower()]
            self.predicate = _negate(ranges) if letter.isupper() else ranges
            return -1 if in_class else _class_text(self.predicate)
        if letter in "ABGRXZbz":
            if letter == "b" and create and self.peek() == ord("{"):
                if self.skip() == ord("g"):
                    if self.read() == ord("}"):
                        self.untranslatable("\\b{g}")
                        return "(?:)"
                    raise _Error("Illegal/unsupported escape sequence")
                self.unread()
                self.unread()
            if letter in "Az":
                return "\\" + letter
            self.untranslatable(f"\\{letter}")
            return "(?:)"
        if letter == "k":
            if self.read() != ord("<"):
                raise _Error("\\k is not followed by '<' for named capturing group")
            name = self.groupname(self.read())
            if name not in self.names:
                raise _Error(f"named capturing group <{name}> does not exist")
            self.untranslatable("a back-reference")
            return "(?:)"
        if letter == "N":
            raise _Unsure("\\N{...} (the JDK's character names)")
        simple = {"a": 0x07, "e": 0x1B, "f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09}
        if letter in simple:
            return simple[letter]
        if letter == "c":
            if self.cursor < self.length:
                return self.read() ^ 64
            raise _Error("Illegal control escape sequence")
        if letter == "u":
            return self.unicode()
        if letter == "x":
            return self.hexadecimal()
        return char

    def backref(self) -> None:
        number = self.at(self.cursor - 1) - 0x30
        while 0x30 <= self.peek() <= 0x39:
            longer = number * 10 + self.peek() - 0x30
            if self.groups - 1 < longer:
                break
            number = longer
            self.read()

    def octal(self) -> int:
        first = self.read()
        if 0x30 <= first <= 0x37:
            second = self.read()
            if 0x30 <= second <= 0x37:
                third = self.read()
                if 0x30 <= third <= 0x37 and first <= 0x33:
                    return (first - 0x30) * 64 + (second - 0x30) * 8 + third - 0x30
                self.unread()
                return (first - 0x30) * 8 + second - 0x30
            self.unread()
            return first - 0x30
        raise _Error("Illegal octal escape sequence")

    def hexadecimal(self) -> int:
        first = self.read()
        if _is_hex(first):
            second = self.read()
            if _is_hex(second):
                return int(chr(first) + chr(second), 16)
        elif first == ord("{") and _is_hex(self.peek()):
            value = 0
            while _is_hex(char := self.read()):
                value = value * 16 + int(chr(char), 16)
                if value > _MAX_CODE_POINT:
                    raise _Error("Hexadecimal codepoint is too big")
            if char != ord("}"):
                raise _Error("Unclosed hexadecimal escape sequence")
            return value
        raise _Error("Illegal hexadecimal escape sequence")

    def uxxxx(self) -> int:
        value = 0
        for _ in range(4):
            char = self.read()
            if not _is_hex(char):
                raise _Error("Illegal Unicode escape sequence")
            value = value * 16 + int(chr(char), 16)
        return value

    def unicode(self) -> int:
        value = self.uxxxx()
        if 0xD800 <= value <= 0xDBFF:
            saved = self.cursor
            if self.read() == ord("\\") and self.read() == ord("u"):
                low = self.uxxxx()
                if 0xDC00 <= low <= 0xDFFF:
                    return 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
            self.cursor = saved
        return value

    def family_after_p(self, letter: int) -> _Predicate:
        """``\\p`` or ``\\P`` read (the cursor on the letter): the JDK's family()."""
        one_letter = self.next() != ord("{")
        if one_letter:
            self.unread()
        return self.family(one_letter=one_letter, complement=letter == ord("P"))

    def family(self, *, one_letter: bool, complement: bool) -> _Predicate:
        self.next()
        if one_letter:
            name = chr(self.at(self.cursor))
            self.read()
        else:
            start = self.cursor
            self.temp[self.length] = ord("}")  # the JDK's mark('}')
            while self.read() != ord("}"):
                pass
            self.temp[self.length] = 0
            if self.cursor > self.length:
                raise _Error("Unclosed character family")
            if start + 1 >= self.cursor:
                raise _Error("Empty character family")
            name = "".join(map(chr, self.temp[start : self.cursor - 1]))
        ranges = POSIX_CLASSES.get(name)
        if ranges is None:
            if name not in _OTHER_PROPERTIES:
                raise _Unsure(f"the property name {name}")
            self.untranslatable("a Unicode property")
            return None
        return _negate(ranges) if complement else ranges

    def clazz(self, *, consume: bool) -> _Predicate:
        """The JDK's clazz(): the class's code points (None: only the JDK knows them)."""
        self.deeper()
        prev: _Slot = False  # False: the JDK's null
        current: _Slot = False
        bits = _BitClass()
        has_bits = False
        negated = False
        char = self.next()
        if char == ord("^") and self.at(self.cursor - 1) == ord("["):
            char = self.next()
            negated = True
        while True:
            if char == ord("["):
                current = self.clazz(consume=True)
                prev = current if prev is False else _join(prev, current, _union)
                char = self.peek()
                continue
            if char == ord("&"):
                char = self.next()
                if char == ord("&"):
                    char = self.next()
                    right: _Slot = False
                    while char not in (ord("]"), ord("&")):
                        if char == ord("["):
                            inner = self.clazz(consume=True)
                        else:
                            self.unread()
                            inner = self.clazz(consume=False)
                        right = inner if right is False else _join(right, inner, _union)
                        char = self.peek()
                    if has_bits:
                        if prev is False:
                            prev = current = bits.ranges()
                        else:
                            prev = _join(prev, bits.ranges(), _union)
                        has_bits = False
                    if right is not False:
                        current = right
                    if prev is False:
                        if right is False:
                            raise _Error("Bad class syntax")
                        prev = right
                    elif current is False:  # the JDK intersects with null: it throws on use
                        raise _Unsure("an intersection with nothing on its right")
                    else:
                        prev = _join(prev, current, _intersect)
                    continue
                self.unread()
            elif char == 0 and self.cursor >= self.length:
                raise _Error("Unclosed character class")
            elif char == ord("]") and (prev is not False or has_bits):
                if consume:
                    self.next()
                result: _Predicate
                if prev is False:
                    result = bits.ranges()
                elif has_bits:
                    result = _join(prev, bits.ranges(), _union)
                else:
                    result = prev
                self.depth -= 1
                return _negate(result) if negated and result is not None else result
            current = self.range(bits)
            if current is False:
                has_bits = True
            elif prev is False:
                prev = current
            else:
                prev = _join(prev, current, _union)
            char = self.peek()

    def range(self, bits: _BitClass) -> _Slot:
        """The JDK's range(): False when the character went into `bits`."""
        char = self.peek()
        if char == ord("\\"):
            char = self.next()
            if char in (ord("p"), ord("P")):
                return self.family_after_p(char)
            is_range = self.at(self.cursor + 1) == ord("-")
            self.unread()
            value = self.escape(in_class=True, is_range=is_range)
            if not isinstance(value, int):
                raise _Unsure("an escape in a class")  # (escape() gives none there)
            if value == -1:
                return self.predicate
            char = value
        else:
            self.next()
        if self.peek() == ord("-"):
            end = self.at(self.cursor + 1)
            if end == ord("["):
                return self.bits_or_single(bits, char)
            if end != ord("]"):
                self.next()
                last = self.peek()
                if last == ord("\\"):
                    value = self.escape(in_class=True, is_range=True, create=False)
                    last = value if isinstance(value, int) else -1
                else:
                    self.next()
                if last < char:
                    raise _Error("Illegal character range")
                return _ranges((char, last))
        return self.bits_or_single(bits, char)

    def bits_or_single(self, bits: _BitClass, char: int) -> _Slot:
        """(Under case folding the JDK takes a few letters out of `bits`: untranslatable then
        anyway, and no error depends on it.)"""
        if char < 256:
            bits.add(self, char)
            return False
        return _ranges(char)


def _join(left: _Slot, right: _Slot, how: Callable[[Ranges, Ranges], Ranges]) -> _Predicate:
    if left is None or right is None or left is False or right is False:
        return None
    return how(left, right)


def _is_hex(char: int) -> bool:
    return chr(char) in "0123456789abcdefABCDEF"


def _literal(char: int) -> str:
    """`char` as an RE2 literal."""
    text = chr(char)
    return text if text.isascii() and text.isalnum() else _hex(char)


def _class_text(ranges: _Predicate) -> str:
    if ranges is None:
        return "(?:)"  # (the pattern is untranslatable: the text is never used)
    if not ranges:
        return "[^\\x00-\\x{10ffff}]"
    parts = (_hex(low) + (f"-{_hex(high)}" if high > low else "") for low, high in ranges)
    return "[" + "".join(parts) + "]"


def _hex(char: int) -> str:
    return f"\\x{{{char:x}}}"


def jdk_compile(pattern: str) -> Translated | JdkError | Untranslatable | Unsure:
    """What JDK 17's ``Pattern.compile(pattern)`` does with `pattern` (the module's rules)."""
    parser = _Parser(pattern)
    try:
        regex = parser.compile()
    except _Error as error:
        return JdkError(error.description, parser.cursor - 1)
    except _Unsure as unsure:
        return Unsure(str(unsure))
    if parser.reason is not None:
        return Untranslatable(parser.reason)
    return Translated(regex)
