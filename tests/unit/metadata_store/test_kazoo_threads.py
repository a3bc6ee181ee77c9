"""LoopHandler and HandedResult: the gateway's hand-overs run on the thread that has the event,
everything else still on kazoo's callback threads."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest
from kazoo.protocol.states import Callback

from pulsar_lookup_gateway.metadata_store.kazoo_threads import HandedResult, LoopHandler, inline


@pytest.fixture
def handler() -> Iterator[LoopHandler]:
    started = LoopHandler()
    started.start()
    yield started
    started.stop()


def on_thread(target: Callable[..., object], *args: object) -> None:
    thread = threading.Thread(target=target, args=args, name="completing")
    thread.start()
    thread.join(5)


def test_a_result_hands_itself_over_once_on_the_thread_that_sets_it(handler: LoopHandler) -> None:
    result = handler.async_result()
    assert isinstance(result, HandedResult)
    calls: list[tuple[HandedResult, str]] = []
    result.when_done(lambda done: calls.append((done, threading.current_thread().name)))
    assert calls == []
    on_thread(result.set, "value")
    assert calls == [(result, "completing")]
    assert result.get(timeout=1) == "value"
    result.set("again")  # kazoo sets a result once; a second set must not hand it over again
    assert len(calls) == 1


def test_a_result_already_set_hands_itself_over_at_once(handler: LoopHandler) -> None:
    result = handler.async_result()
    on_thread(result.set_exception, ValueError("no node"))
    calls: list[str] = []
    result.when_done(lambda done: calls.append(threading.current_thread().name))
    assert calls == [threading.current_thread().name]
    assert isinstance(result.exception, ValueError)


def test_a_failing_hand_over_is_logged_and_the_result_still_set(
    handler: LoopHandler, caplog: pytest.LogCaptureFixture
) -> None:
    result = handler.async_result()

    def fails(done: HandedResult) -> None:
        raise RuntimeError("the loop is gone")

    result.when_done(fails)
    with caplog.at_level(logging.ERROR):
        result.set(1)  # must not raise into kazoo's connection loop
    assert result.get(timeout=1) == 1
    assert "error in a ZooKeeper callback" in caplog.text


def test_inline_watches_run_on_the_dispatching_thread_others_on_kazoos(
    handler: LoopHandler,
) -> None:
    threads: dict[str, str] = {}
    queued = threading.Event()

    class Source:  # (the gateway marks a method: ZooKeeperSource._on_watch)
        @inline
        def hand_over(self, event: str) -> None:
            threads[event] = threading.current_thread().name

    def recipe(event: str) -> None:
        threads[event] = threading.current_thread().name
        queued.set()

    on_thread(handler.dispatch_callback, Callback("watch", Source().hand_over, ("inline",)))
    on_thread(handler.dispatch_callback, Callback("watch", recipe, ("queued",)))
    assert queued.wait(5)
    assert threads["inline"] == "completing"
    assert threads["queued"] not in ("completing", threading.current_thread().name)
