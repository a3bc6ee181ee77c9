"""Unit tests are pure: no processes, no sockets, no installed command, no JVM.

The guard below turns a slip into a failing test instead of a slow or machine-dependent one; a
test that needs any of these belongs in tests/integration (or deploy, e2e, reliability)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


class NotAUnitTest(AssertionError):
    pass


def _refuse(what: str) -> Any:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise NotAUnitTest(f"a unit test may not {what}: move it to tests/integration")

    return refuse


@pytest.fixture(autouse=True)
def pure(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("start a process"))
    for method in ("bind", "connect", "connect_ex", "listen"):
        monkeypatch.setattr(socket.socket, method, _refuse(f"{method} a socket"))
    yield
