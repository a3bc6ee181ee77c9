"""http_api.answer_memo: what a memoised answer is counted as, its bounds, and when an entry
is not kept (the view changed under the full path) or not read (the view changed since)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from pulsar_lookup_gateway.http_api.answer_memo import ENTRY_OVERHEAD, Entry, HttpAnswerMemo
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.metadata_store.file import FileSource
from pulsar_lookup_gateway.serving.service import LookupService

CHOICE = ListenerChoice("external", ChoiceSource.SOCKET)
OTHER = ListenerChoice("internal", ChoiceSource.INTERNAL, internal=True)


def service() -> LookupService:
    return LookupService(FileSource("unused.json"), internal_listener="internal")


def ok(body: Any) -> web.Response:
    return web.Response(body=body)


def entry(lookups: LookupService, body: bytes = b"{}") -> Entry:
    return (ok, body, lookups.tally_for(CHOICE, "http"), True)


def count(lookups: LookupService) -> float:
    labels = {"listener": "external", "chosen_by": "socket", "protocol": "http"}
    value = lookups.metrics.registry.get_sample_value("pulsar_broker_lookup_answers_total", labels)
    return value or 0.0


def test_an_answer_is_kept_for_its_view_version_and_counted_when_given() -> None:
    lookups = service()
    memo = HttpAnswerMemo(lookups)
    entries = memo.entries_for(CHOICE)
    mark = memo.mark()
    assert mark is not None
    memo.remember(mark, entries, ("/a", None, False), 2, entry(lookups))
    response = memo.answer(entries, ("/a", None, False))
    assert response is not None and response.body == b"{}"
    assert memo.answer(entries, ("/a", "external", False)) is None
    assert count(lookups) == 1
    lookups.source.view.put_json("/admin/policies/public/default", {})  # a metadata write
    assert memo.mark() is not None
    assert memo.answer(entries, ("/a", None, False)) is None and len(memo) == 0
    assert memo.entries_for(CHOICE) is entries  # cleared in place


def test_an_answer_read_before_a_write_is_not_kept() -> None:
    lookups = service()
    memo = HttpAnswerMemo(lookups)
    entries = memo.entries_for(CHOICE)
    mark = memo.mark()
    assert mark is not None
    lookups.source.view.put_json("/admin/policies/public/default", {})  # while it awaited
    memo.remember(mark, entries, ("/a", None, False), 2, entry(lookups))
    assert not entries and len(memo) == 0


def test_no_mark_without_admission_room() -> None:
    lookups = service()
    memo = HttpAnswerMemo(lookups)
    lookups.admission.max_concurrent = 0
    assert memo.mark() is None


def test_the_memo_starts_over_at_its_count_or_its_bytes() -> None:
    lookups = service()
    memo = HttpAnswerMemo(lookups, max_entries=3, max_bytes=10 * ENTRY_OVERHEAD)
    entries, others = memo.entries_for(CHOICE), memo.entries_for(OTHER)
    mark = memo.mark()
    assert mark is not None
    for n in range(3):
        memo.remember(mark, entries if n % 2 else others, (f"/{n}", None, False), 3, entry(lookups))
    assert len(memo) == 3
    memo.remember(mark, entries, ("/3", None, False), 3, entry(lookups))  # the fourth
    assert len(memo) == 1 and list(entries) == [("/3", None, False)] and not others
    memo.remember(mark, entries, ("/3", None, False), 3, entry(lookups))  # the same key again
    assert len(memo) == 1
    memo.remember(mark, others, ("/big", None, False), 9 * ENTRY_OVERHEAD, entry(lookups))
    assert len(memo) == 1 and list(others) == [("/big", None, False)] and not entries
