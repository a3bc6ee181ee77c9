from __future__ import annotations

import pytest

from lookup.selection import ChoiceSource, ListenerChoice, choose_listener

E, H, S = ChoiceSource.EXPLICIT, ChoiceSource.HEADER, ChoiceSource.SOCKET
INT = ChoiceSource.INTERNAL


@pytest.mark.parametrize(
    ("explicit", "header", "socket", "expected"),
    [
        ("ext", "hdr", "sock", ListenerChoice("ext", E)),
        (None, "hdr", "sock", ListenerChoice("hdr", H)),
        ("", "hdr", "sock", ListenerChoice("hdr", H)),  # blank means absent (Pulsar #14304)
        ("  ", None, "sock", ListenerChoice("sock", S)),
        (None, "", "sock", ListenerChoice("sock", S)),
        (None, None, None, ListenerChoice("internal", INT, internal=True)),
        ("", "", None, ListenerChoice("internal", INT, internal=True)),
        (" ext ", None, None, ListenerChoice("ext", E)),
        ("internal", None, "sock", ListenerChoice("internal", E, internal=True)),
        (None, None, "internal", ListenerChoice("internal", S, internal=True)),
    ],
)
def test_precedence(
    explicit: str | None, header: str | None, socket: str | None, expected: ListenerChoice
) -> None:
    choice = choose_listener(
        explicit=explicit, header=header, socket_listener=socket, internal_listener="internal"
    )
    assert choice == expected
    assert choice.uses_listener_urls is (expected.source is not INT)


async def test_metric_labels_use_only_declared_listener_names() -> None:
    from lookup.service import UNDECLARED, LookupService
    from metadata_store.file import FileSource

    service = LookupService(FileSource("unused.json"), declared_listeners=["internal"])
    assert service._label("internal") == "internal"
    assert service._label("random-name-from-a-client") == UNDECLARED
    assert service._label(None) == ""
    assert LookupService(FileSource("unused.json"))._label("anything") == "anything"
