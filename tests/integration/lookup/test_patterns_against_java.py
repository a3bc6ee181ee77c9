r"""Topic-list patterns against the real engines: the gateway's decision for each pattern
(filtered set, unfiltered, MetadataError) against what a broker does with it, computed by RE2J
and the JDK themselves (tests/java/PatternReference.java: TopicsPatternFactory's RE2J first,
JDK fallback, ``matcher(name).matches()``), on a fixed corpus of tricky patterns and a few
hundred seeded random ones, over ASCII and non-ASCII names.

The rule: whenever the gateway filters, its set is the broker's; whenever it answers
MetadataError, the broker fails too, with the same PatternSyntaxException text; unfiltered is
always allowed (counted and printed). One JVM for the whole session (~1 s).

RE2J is Debian's ``libre2j-java`` (1.7; ``make install`` installs it, with Java 17). Master's
RE2J 1.8 also compiles named groups ``(?<name>...)``, which 1.7 refuses: the gateway follows
1.8, so neither the corpus nor the generator has them.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pulsar_lookup_gateway.lookup.topic_list import (
    PatternInvalid,
    PatternRefused,
    compile_topics_pattern,
)

REFERENCE = Path(__file__).resolve().parents[2] / "java" / "PatternReference.java"
RE2J_JAR = Path(os.environ.get("RE2J_JAR", "/usr/share/java/re2j.jar"))
#: JVMs that live seconds: the quick compiler only, one GC thread.
SHORT_LIVED_JVM = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss8m"]
MAX_LENGTH = 50

NAMES = [
    "public/default/t1",
    "public/default/orders",
    "public/default/Orders",
    "public/default/a-b",
    "public/default/A_B",
    "public/default/caf\u00e9",
    "public/default/x.y",
    "public/default/x7",
    "a",
    "ai",
    "ab",
    "aa",
    "aaa",
    "A",
    "abc",
    "ABC",
    "k",
    "K",
    "\u212a",  # KELVIN SIGN: folds to k in Unicode
    "a b",
    "a\tb",
    "a\x0bb",
    "a\nb",
    "a\rb",
    "a\x85b",
    "a\u2028b",
    "a\u00a0b",
    "a\n",
    "a\r\n",
    "caf\u00e9",
    "\u00e9",
    "\u00c9",
    "\u0663",  # ARABIC-INDIC DIGIT THREE
    "\U0001f600",
    "x-a",
    "x5a",
    "xBa",
    "x@a",
    "x a",
    "xza",
    "x]a",
    "x^a",
    "x\\a",
    "x\x1ba",
    "x)",
    "a{2}",
    "a{",
    "{",
    "}",
    "]",
    "[",
    "-",
    "&",
    "z",
    "0",
    "5",
    "_",
    "\\",
    "a,b",
    "abc$",
    "$",
    "\x1b",
    "\x07",
    "\x00",
    "",
]

CORPUS = [
    # Finding 1: a class escape next to `-` is no range in the JDK.
    r"x[\s-z]\p{Lower}",
    r"x[\p{Alpha}-z]\p{Lower}",
    r"x[^\s-a]\p{Lower}",
    r"x[a-\s]\p{Lower}",
    r"x[.-\p{Lower}]",
    r"x[\d-]\p{Lower}",
    r"x[-\w]\p{Lower}",
    r"x[\v-\x0c]\p{Lower}",
    r"x[\w-\d]\p{Lower}",
    r"[\s-z]",
    # Finding 2: \c takes the next character, whatever it is.
    r"a\c)",
    r"a\c(",
    r"a\c[",
    "a\\c\\",
    r"a\c",
    r"\cJ\p{Lower}",
    # Finding 3: the JDK's first error, and RE2J's own refusals.
    r"{*",
    r"{?",
    r"a{{1,}",
    r"a{*",
    r"a**",
    r"a*?+",
    r"(]/\Q",
    r"(\Q)\E",
    r"\Q(\E)",
    r"x{2,1}",
    r"x{1,",
    r"x{",
    r"x{99999999999}",
    r"x{2,99999999999}",
    r"x{1001,}",
    r"x{0,1000}",
    r"(?$a)",
    r"(?P<a>x)(?P<a>y)",
    r"(?P<a-b>x)",
    "(?P<\u00e9>x)",
    r"(?P<ok>x)\p{Lower}",
    r"\k<a>",
    r"\kx",
    r"\p{Lower",
    r"\p{}",
    r"[a-",
    r"[z-a]",
    r"[&&]",
    r"[a&&]\p{Lower}",
    r"\x",
    r"\xg",
    r"\x{110000}",
    r"\x{41",
    r"\u00",
    r"\0",
    r"\08",
    "\\",
    r"a\\",
    r"(a",
    r"a)",
    r"a)(",
    r"[]",
    r"[]a]\p{Lower}",
    r"[^]a]\p{Lower}",
    r"\C",
    r"\Q\C\E",
    r"\p{Lower}\C",
    r"(?z)",
    r"(?i",
    # The broker's meaning: RE2J where it compiles, the JDK's elsewhere.
    r"public/default/\w+",
    r"public/default/t\d",
    r"public/default/caf\b.",
    r"public/default/caf\B.",
    r"(?i)k",
    r"(?i)K",
    r"a\sb",
    r"a.b",
    r"a$",
    r"a$\n",
    r"\p{Lower}+$",
    r"\p{Lower}$|\p{Upper}+",
    r"(\p{Lower}$)",
    r"\p{Lower}.\p{Lower}",
    r"\p{Lower}\s\p{Lower}",
    r"\p{Lower}\S\p{Lower}",
    r"\p{Lower}\h\p{Lower}",
    r"\p{Lower}\v\p{Lower}",
    r"\p{Lower}\V",
    r"\p{Alpha}\p{Digit}",
    r"\P{Digit}+",
    r"\p{Punct}",
    r"\p{XDigit}+",
    r"\p{Graph}+",
    r"\p{Print}+",
    r"\p{Blank}",
    r"\p{Cntrl}",
    r"\p{ASCII}*",
    r"\p{Space}",
    r"\pL+",
    r"\p{L}\p{Lower}",
    r"\p{IsAlphabetic}",
    r"\p{javaLowerCase}+",
    r"(?i)\p{Lower}",
    r"(?i)abc",
    r"(?-i)abc\p{Lower}",
    r"(?x)a b",
    r"(?s)a.b\p{Lower}",
    r"(?m)^a$\p{Lower}",
    r"\p{Lower}\b.",
    r"(?!x)\p{Lower}",
    r"(?=a)\p{Lower}+",
    r"(?<=a)b",
    r"(?>a)\p{Lower}",
    r"(a)\1\p{Lower}",
    r"a*+\p{Lower}",
    r"[a-z&&[^e]]\p{Lower}",
    r"[a&&b&c]\p{Lower}",
    r"[ab&&bc]\p{Lower}",
    r"[^a[b]]\p{Lower}",
    r"[a[^b]]\p{Lower}",
    r"[\Q]\E]\p{Lower}",
    r"\Q.\E\p{Lower}",
    r"\Qa{\E*",
    r"\Q1\E2\p{Lower}",
    r"\x41\u0062\0143\p{Lower}",
    r"\x{1F600}\p{Lower}*",
    r"\e\p{Lower}",
    r"\t\p{Lower}",
    r"[[:alpha:]]+",
    r"[[:alpha:]]\p{Lower}",
    r"\Z",
    r"a\z",
    r"\Aa\p{Lower}",
    r"{1}a",
    r"x{1}{2}",
    r"x{,1}",
    r"a{1001}",
    r"\p{Lower}{2,3}",
    r"\p{Lower}{2}?",
    r"\N{LATIN SMALL LETTER A}",
    r"\b{g}",
    r"a\b{x}",
    r".*",
    r"^.*$",
]

#: The generator's alphabet: regex tokens, each a unit.
TOKENS = [
    r"\p{Lower}", r"\p{Upper}", r"\p{Alpha}", r"\p{Punct}", r"\P{Alnum}", r"\p{Space}",
    r"\pL", ".", r"\s", r"\S", r"\w", r"\d", r"\h", r"\v", r"\b", r"\B", "a", "b", "z", "A",
    "\u00e9", "-", "[", "]", "[^", "&&", "(", ")", "(?:", "(?i)", "(?=", "(?<=", "|", "*",
    "+", "?", "{", "}", "{2}", "{1,}", "{0,2}", ",", "$", "^", r"\Q", r"\E", r"\e", r"\x41",
    r"\x{e9}", r"\c", r"\t", r"\n", r"\.", r"\-", r"\\", r"\[", r"\]", r"\Z", r"\z", r"\u0041",
    r"\0101", r"\1", r"\C", " ", ":", "/", "0", "5", "_", "public/default/",
]  # fmt: skip


def random_patterns(count: int, seed: int = 20261126) -> list[str]:
    generator = random.Random(seed)
    patterns: dict[str, None] = {}
    while len(patterns) < count:
        pattern = "".join(generator.choice(TOKENS) for _ in range(generator.randint(1, 8)))
        if len(pattern) <= MAX_LENGTH and not _named_group(pattern):
            patterns[pattern] = None
    return list(patterns)


def _named_group(pattern: str) -> bool:
    index = pattern.find("(?<")
    while index >= 0:
        if pattern[index + 3 : index + 4] not in ("=", "!"):
            return True
        index = pattern.find("(?<", index + 1)
    return False


@dataclass(frozen=True)
class Broker:
    """What the broker does with a pattern: engine ``re2j`` / ``jdk`` and the names matched,
    or ``error`` with the JDK's text, or ``other`` (anything else thrown)."""

    engine: str
    matched: tuple[bool, ...] = ()
    error: str = ""


def _hex(text: str) -> str:
    return text.encode("utf-8").hex()


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not RE2J_JAR.is_file() or shutil.which("javac") is None:
        pytest.fail(f"RE2J ({RE2J_JAR}) or javac is missing: run `make install`")
    classes = tmp_path_factory.mktemp("pattern-reference")
    subprocess.run(
        ["javac", "-d", str(classes), "-cp", str(RE2J_JAR), str(REFERENCE)],
        check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    return classes


@pytest.fixture(scope="session")
def broker(java_classes: Path) -> dict[str, Broker]:
    """The broker's answer for every pattern of the corpus and the generator: one JVM."""
    patterns = list(dict.fromkeys(CORPUS + random_patterns(600)))
    lines = [str(len(NAMES)), *map(_hex, NAMES), *map(_hex, patterns)]
    result = subprocess.run(
        ["java", *SHORT_LIVED_JVM, "-cp", f"{RE2J_JAR}{os.pathsep}{java_classes}",
         "PatternReference"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    answers = result.stdout.splitlines()
    assert len(answers) == len(patterns), result.stderr[-2000:]
    out = {}
    for pattern, answer in zip(patterns, answers, strict=True):
        engine, _, rest = answer.partition(" ")
        if engine in ("error", "other"):
            out[pattern] = Broker(engine, error=bytes.fromhex(rest).decode())
        else:
            out[pattern] = Broker(engine, tuple(bit == "1" for bit in rest))
    return out


def disagreements(patterns: list[str], broker: dict[str, Broker]) -> Iterator[str]:
    """Each pattern where the gateway breaks the rule, explained; counts printed."""
    counts: Counter[str] = Counter()
    for pattern in patterns:
        expected = broker[pattern]
        gateway = compile_topics_pattern(pattern, MAX_LENGTH)
        if isinstance(gateway, PatternRefused):
            counts[f"unfiltered (broker: {expected.engine})"] += 1
        elif isinstance(gateway, PatternInvalid):
            counts["MetadataError"] += 1
            wanted = f"java.util.regex.PatternSyntaxException: {expected.error}"
            if expected.engine != "error" or gateway.message != wanted:
                yield f"{pattern!r}: gateway {gateway.message!r}, broker {expected}"
        else:
            counts[f"filtered as {gateway.engine} (broker: {expected.engine})"] += 1
            matched = tuple(gateway.fullmatch(name) for name in NAMES)
            if expected.engine not in ("re2j", "jdk") or matched != expected.matched:
                differ = [
                    f"{name!r}: gateway {mine}"
                    for name, mine, theirs in zip(NAMES, matched, expected.matched, strict=False)
                    if mine != theirs
                ]
                yield f"{pattern!r} ({gateway.engine}): broker {expected.engine} {differ}"
    print(f"\n{len(patterns)} patterns:", dict(sorted(counts.items())))


def test_the_tricky_patterns_mean_what_they_mean_on_the_broker(broker: dict[str, Broker]) -> None:
    wrong = list(disagreements(list(dict.fromkeys(CORPUS)), broker))
    assert not wrong, "\n".join(wrong)


def test_random_patterns_mean_what_they_mean_on_the_broker(broker: dict[str, Broker]) -> None:
    wrong = list(disagreements(random_patterns(600), broker))
    assert not wrong, "\n".join(wrong[:40])


def test_the_corpus_reaches_every_answer(broker: dict[str, Broker]) -> None:
    """The corpus exercises each of the gateway's answers for each of the broker's: filtered
    in RE2J's and in the JDK's meaning, the JDK's errors, and unfiltered."""
    kinds: Counter[str] = Counter()
    for pattern in CORPUS:
        gateway = compile_topics_pattern(pattern, MAX_LENGTH)
        kinds[type(gateway).__name__ + ":" + getattr(gateway, "engine", "")] += 1
    assert kinds["TopicsPattern:re2j"] >= 10 and kinds["TopicsPattern:jdk"] >= 30
    assert kinds["PatternInvalid:"] >= 30 and kinds["PatternRefused:"] >= 10
    assert {answer.engine for answer in broker.values()} >= {"re2j", "jdk", "error"}
