"""Topic-list patterns mean what the broker makes of them (issue 27, items 1 and 5).

The broker compiles a pattern with RE2J and, when RE2J refuses it, with the JDK
(TopicsPatternFactory.internalCreate, RE2J_WITH_JDK_FALLBACK), after
TopicList.removeTopicDomainScheme; ServerCnx.internalHandleGetTopicsOfNamespace answers a
filtering that throws with MetadataError and the exception's text. Each expectation below is
the broker's, derived from those methods and the engines' documented semantics: RE2J's
``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII (Utils.isWordRune), the JDK's POSIX classes are
US-ASCII, the JDK's ``.`` excludes every line terminator and its ``\\s`` includes ``\\x0B``.
Python's ``re`` (the gateway's engine before RE2) gives the opposite answer for the Unicode
cases: those are the cases that would differ.
"""

from __future__ import annotations

import re

import pytest

from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure, ServerError
from pulsar_lookup_gateway.lookup.topic_list import (
    PatternInvalid,
    PatternRefused,
    TopicLister,
    TopicsPattern,
    compile_topics_pattern,
)
from pulsar_lookup_gateway.lookup.topics import NamespaceName
from pulsar_lookup_gateway.lookup.view import ClusterView

NS = NamespaceName("public", "default")
LEDGERS = "/managed-ledgers/public/default/persistent"


def compiled(pattern: str) -> TopicsPattern:
    result = compile_topics_pattern(pattern, 50)
    assert isinstance(result, TopicsPattern), result
    return result


@pytest.mark.parametrize(
    ("pattern", "name", "broker"),
    [
        # RE2J compiles these: ASCII classes and word boundaries.
        ("public/default/\\w+", "public/default/caf\u00e9", False),
        ("public/default/\\w+", "public/default/cafe", True),
        ("public/default/t\\d", "public/default/t\u0663", False),  # ARABIC-INDIC THREE
        ("public/default/a\\sb", "public/default/a\u00a0b", False),
        ("public/default/a\\sb", "public/default/a\x0bb", False),  # RE2J's \s has no \v
        # \b between 'f' and 'é': a boundary for RE2J (é is no ASCII word character); the
        # JDK up to 18 would say no (Unicode \b). Master compiles it with RE2J.
        ("public/default/caf\\b.", "public/default/caf\u00e9", True),
        ("public/default/caf\\B.", "public/default/caf\u00e9", False),
        ("(?i)public/default/k", "public/default/\u212a", True),  # RE2J folds Unicode case
    ],
)
def test_what_re2j_compiles_has_re2js_meaning(pattern: str, name: str, broker: bool) -> None:
    """TopicsPatternFactory.internalCreate: RE2J first; RE2 gives RE2J's answer."""
    topics_pattern = compiled(pattern)
    assert topics_pattern.engine == "re2j"
    assert topics_pattern.fullmatch(name) is broker


def test_pythons_re_would_differ_on_the_unicode_cases() -> None:
    """The reason for the table above: Python's re says the opposite on each Unicode case."""
    assert re.fullmatch("public/default/\\w+", "public/default/caf\u00e9")
    assert re.fullmatch("public/default/t\\d", "public/default/t\u0663")
    assert not re.fullmatch("public/default/caf\\b.", "public/default/caf\u00e9")
    with pytest.raises(re.error):
        re.compile("public/default/\\p{Lower}+")


@pytest.mark.parametrize(
    ("pattern", "name", "broker"),
    [
        # RE2J refuses \p{Lower} & co.: the JDK compiles them, US-ASCII only.
        ("public/default/\\p{Lower}+", "public/default/orders", True),
        ("public/default/\\p{Lower}+", "public/default/ord\u00e9rs", False),
        ("public/default/\\p{Lower}+", "public/default/Orders", False),
        ("public/default/\\p{Alpha}\\p{Digit}", "public/default/x7", True),
        ("public/default/\\p{Alpha}\\p{Digit}", "public/default/\u00e97", False),
        ("public/default/[\\p{Upper}_]+", "public/default/A_B", True),
        ("public/default/\\P{Digit}+", "public/default/abc", True),
        ("public/default/\\P{Digit}+", "public/default/ab1", False),
        ("public/default/\\p{Punct}", "public/default/~", True),
        ("public/default/\\p{XDigit}+", "public/default/c0ffee", True),
        # The rest of such a pattern has the JDK's meaning too.
        ("public/default/\\p{Lower}.", "public/default/a\u2028", False),  # . : no terminator
        ("public/default/\\p{Lower}.", "public/default/a\r", False),
        ("public/default/\\p{Lower}.", "public/default/a\u00e9", True),
        ("public/default/\\p{Lower}\\s", "public/default/a\x0b", True),  # the JDK's \s has \v
        ("public/default/\\p{Lower}+$", "public/default/abc", True),
        # The JDK's classes, computed as the JDK computes them: a class escape next to `-`
        # is no range (finding 1 of the review), intersections and nested classes.
        ("x[\\s-z]\\p{Lower}", "x-a", True),
        ("x[\\s-z]\\p{Lower}", "x5a", False),
        ("x[\\s-z]\\p{Lower}", "x@a", False),
        ("x[^\\s-a]\\p{Lower}", "xBa", True),
        ("public/default/[a-z&&[^e]]\\p{Lower}", "public/default/ee", False),
        ("public/default/[a-z&&[^e]]\\p{Lower}", "public/default/fe", True),
        # \c takes the next character, whatever it is (finding 2): \c) is 'i'.
        ("a\\c)", "ai", True),
        ("a\\c(\\p{Lower}", "ahx", True),
    ],
)
def test_what_only_the_jdk_compiles_has_the_jdks_meaning(
    pattern: str, name: str, broker: bool
) -> None:
    """TopicsPatternFactory.internalCreate: RE2J's PatternSyntaxException, then the JDK."""
    topics_pattern = compiled(pattern)
    assert topics_pattern.engine == "jdk"
    assert topics_pattern.fullmatch(name) is broker


@pytest.mark.parametrize(
    "pattern",
    [
        "(?i)public/default/\\p{Lower}",  # the JDK folds ASCII only without (?u)
        "public/default/\\p{Lower}\\b.",  # \b changed meaning in JDK 19
        "public/default/(?!x)\\p{Lower}",  # a look-around
        "public/default/\\p{L}\\p{Lower}",  # a Unicode class, in the JDK's meaning
        "public/default/\\p{Lower}$\\n",  # $ before a line terminator
    ],
)
def test_what_the_jdk_means_otherwise_is_answered_unfiltered(pattern: str) -> None:
    """Where RE2 cannot give the JDK's meaning exactly, the list goes unfiltered
    (filtered=false): the client filters it (PatternMultiTopicsConsumerImpl does so)."""
    result = compile_topics_pattern(pattern, 50)
    assert isinstance(result, PatternRefused), result
    view = ClusterView.from_snapshot(
        {"/admin/policies/public/default": {}, f"{LEDGERS}/a": {}, f"{LEDGERS}/b": {}}
    )
    listing = TopicLister().listing(view, NS, pattern)
    assert not listing.filtered and len(listing.topics) == 2


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        # TopicList.removeTopicDomainScheme throws for another scheme.
        (
            "http://public/default/x",
            "java.lang.IllegalArgumentException: Does not support topic domain: http",
        ),
        (
            "://public/default/x",
            "java.lang.IllegalArgumentException: Does not support topic domain: ",
        ),
        # Neither RE2J nor the JDK compiles these.
        (
            "public/default/(orders",
            "java.util.regex.PatternSyntaxException: Unclosed group near index 22",
        ),
        (
            "public/default/orders)",
            "java.util.regex.PatternSyntaxException: Unmatched closing ')' near index 20",
        ),
        (
            "public/default/[a-z",
            "java.util.regex.PatternSyntaxException: Unclosed character class near index 18",
        ),
        # The JDK's first error, at the JDK's index (after its \Q...\E rewriting).
        ("a**", "java.util.regex.PatternSyntaxException: Dangling meta character '*' near index 2"),
        ("(]/\\Q", "java.util.regex.PatternSyntaxException: Unclosed group near index 3"),
        (
            "x[.-\\p{Lower}]",
            "java.util.regex.PatternSyntaxException: "
            "Illegal/unsupported escape sequence near index 5",
        ),
        # RE2 compiles these, RE2J refuses them, the JDK too.
        ("{*", "java.util.regex.PatternSyntaxException: Illegal repetition near index 1"),
        ("a{{1,}", "java.util.regex.PatternSyntaxException: Illegal repetition near index 2"),
        (
            "public/default/\\C+",
            "java.util.regex.PatternSyntaxException: "
            "Illegal/unsupported escape sequence near index 16",
        ),
    ],
)
def test_a_pattern_the_brokers_filtering_throws_on_is_a_metadata_error(
    pattern: str, message: str
) -> None:
    """ServerCnx.internalHandleGetTopicsOfNamespace: the exception of TopicList.filterTopics
    is answered with getClientErrorCode(new ServerMetadataException(ex)) = MetadataError."""
    result = compile_topics_pattern(pattern, 50)
    assert result == PatternInvalid(message)
    view = ClusterView.from_snapshot({"/admin/policies/public/default": {}, f"{LEDGERS}/a": {}})
    with pytest.raises(LookupFailure) as failed:
        TopicLister().listing(view, NS, pattern)
    assert failed.value.kind is FailureKind.INVALID_PATTERN
    assert failed.value.code is ServerError.MetadataError
    assert failed.value.message == message


def test_the_domain_and_namespace_of_a_pattern_are_only_matched() -> None:
    """TopicList.removeTopicDomainScheme drops either domain whatever the request's mode, and
    a pattern naming another namespace keeps nothing: no error, a filtered empty list."""
    view = ClusterView.from_snapshot(
        {"/admin/policies/public/default": {}, f"{LEDGERS}/orders": {}, f"{LEDGERS}/x": {}}
    )
    lister = TopicLister()
    other_domain = lister.listing(view, NS, "non-persistent://public/default/orders")
    assert other_domain.filtered and other_domain.topics == ("persistent://public/default/orders",)
    other_namespace = lister.listing(view, NS, "persistent://other/ns/.*")
    assert other_namespace.filtered and other_namespace.topics == ()


def test_dot_star_keeps_every_topic() -> None:
    """TopicsPatternFactory.internalCreate: `.*` (TopicList.ALL_TOPICS_PATTERN) is matchAll,
    even for a name with a line break, which RE2J's `.` would not match."""
    everything = compiled("persistent://.*")
    assert everything.match_all and everything.fullmatch("public/default/a\nb")
    assert not compiled("public/default/.*").fullmatch("public/default/a\nb")
