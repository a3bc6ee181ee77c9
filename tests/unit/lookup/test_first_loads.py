"""A partial view's first load of a node is no write: no answer could have read it (every read
raised NodeNotLoaded), so the version stays and observers (the answer memo, the ownership
watch) hear nothing; a node or list read again unchanged is no write either. Real changes, and
every write to a complete view, still are."""

from __future__ import annotations

import json

import pytest

from pulsar_lookup_gateway.lookup.errors import NodeNotLoaded
from pulsar_lookup_gateway.lookup.view import ClusterView
from pulsar_lookup_gateway.metadata_store.synthetic import ownership_node
from pulsar_lookup_gateway.serving.memo import AnswerMemo, place_of

OWNED = "/namespace/public/default/0x00000000_0x40000000"


def heard(view: ClusterView) -> list[str]:
    paths: list[str] = []
    view.observe(paths.append)
    return paths


def data(i: int) -> bytes:
    return json.dumps(ownership_node(i)).encode()


def test_first_loads_are_no_writes() -> None:
    view = ClusterView(complete=False)
    paths = heard(view)
    version = view.version
    view.set_children("/namespace/public/default", ["0x00000000_0x40000000"], 7)
    view.put_bytes(OWNED, data(1), (5, 6))
    view.put_absent("/admin/local-policies/public/default")
    assert (paths, view.version) == ([], version)
    # What was loaded is read as usual.
    assert view.raw(OWNED)["nativeUrl"] == "pulsar://10.0.0.1:6650"
    assert view.zxid(OWNED) == 6 and view.zxid("/namespace/public/default/") == 7
    assert view.exists("/admin/local-policies/public/default") is False


def test_unchanged_reads_are_no_writes_and_changes_are() -> None:
    view = ClusterView(complete=False)
    view.set_children("/namespace/public/default", ["0x00000000_0x40000000"], 7)
    view.put_bytes(OWNED, data(1), (5, 6))
    view.put_absent("/admin/x")
    paths = heard(view)
    version = view.version
    # A re-watch after a reconnect reads the same bytes, list and absence: nothing changed.
    view.put_bytes(OWNED, data(1), (5, 6))
    view.set_children("/namespace/public/default", ["0x00000000_0x40000000"], 7)
    view.put_absent("/admin/x")
    assert (paths, view.version) == ([], version)
    # A new owner, a list that changed, a node that appeared, a node that went: writes.
    view.put_bytes(OWNED, data(2), (5, 9))
    view.set_children("/namespace/public/default", [], 10)
    view.put_bytes("/admin/x", b"{}", (11, 11))
    view.put_absent(OWNED)
    assert paths == [OWNED, "/namespace/public/default/", "/admin/x", OWNED]
    assert view.version == version + 4
    # The same bytes with a newer modification date are a write too (answers are dated).
    view.put_bytes("/admin/x", b"{}", (11, 12))
    assert paths[-1] == "/admin/x"


def test_a_complete_view_hears_every_write() -> None:
    view = ClusterView(complete=True)
    paths = heard(view)
    view.put_bytes(OWNED, data(1))
    assert paths == [OWNED]


def test_first_loads_keep_the_answers_the_memo_holds() -> None:
    """A cold replica's reads landing while it answers do not drop what it answered."""
    view = ClusterView(complete=False)
    memo = AnswerMemo()
    memo.follow(view)
    table = memo.table("answers")
    view.set_children("/namespace/public/default", ["0x00000000_0x40000000"])
    view.put_bytes(OWNED, data(1), (5, 6))
    memo.remember(None, table, "kept", "answer", place_of("public/default", 0), 10)
    mark = memo.mark(view)
    # Another bundle's and another namespace's first loads land.
    view.set_children("/namespace/public/other", ["0x00000000_0xffffffff"])
    view.put_bytes("/namespace/public/other/0x00000000_0xffffffff", data(2), (8, 8))
    view.put_bytes("/namespace/public/default/0x40000000_0x80000000", data(3), (9, 9))
    assert table == {"kept": "answer"}
    # ... and an answer made while they landed is kept too (the view did not change).
    memo.remember(mark, table, "made", "later", place_of("public/default", 0), 10)
    assert table == {"kept": "answer", "made": "later"}
    # A real write of the bundle drops what was filed under it.
    view.put_bytes(OWNED, data(2), (5, 12))
    assert table == {}
    with pytest.raises(NodeNotLoaded):
        view.raw("/namespace/public/default/0xc0000000_0xffffffff")
