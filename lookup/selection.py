"""Which advertised listener a lookup answers for, and what a listener name may be."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

#: A listener name: letters, digits, '_' and '-' (the characters Pulsar's broker accepts in
#: advertisedListeners), at most 128 of them. The config, the HTTP listenerName query and the
#: Spark job's zones file are all checked with this one rule.
LISTENER_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
LISTENER_NAME_RULE = "letters, digits, '_' and '-', at most 128 characters"


def is_listener_name(text: str) -> bool:
    return LISTENER_NAME.fullmatch(text) is not None


class ChoiceSource(StrEnum):
    """How the listener was chosen; a label in logs and metrics."""

    EXPLICIT = "explicit"  # binary advertised_listener_name, HTTP listenerName query
    HEADER = "header"  # HTTP X-Pulsar-ListenerName (an ingress or mesh may inject it)
    SOCKET = "socket"  # the listener the client's bind address is tagged with
    INTERNAL = "internal"  # none of the above: the brokers' default URLs


@dataclass(frozen=True, slots=True)
class ListenerChoice:
    name: str | None  # for INTERNAL, the configured internal listener's name (a label only)
    source: ChoiceSource
    # The name is the configured internal listener's: its missing web URLs may be filled with
    # the brokers' defaults, which are internal addresses too. No other listener's may.
    internal: bool = False

    @property
    def uses_listener_urls(self) -> bool:
        """INTERNAL answers with the brokers' default URLs, which Pulsar derives from the
        internal listener; every other choice reads the named listener's URLs."""
        return self.source is not ChoiceSource.INTERNAL


def _given(name: str | None) -> str | None:
    # Blank means absent: the C++ and Go clients always send the field, "" when unset.
    if name is None:
        return None
    name = name.strip()
    return name or None


def choose_listener(
    *,
    explicit: str | None = None,
    header: str | None = None,
    socket_listener: str | None = None,
    internal_listener: str | None = None,
) -> ListenerChoice:
    """Precedence: explicit name > X-Pulsar-ListenerName header > socket tag > internal."""
    if (name := _given(explicit)) is not None:
        return ListenerChoice(name, ChoiceSource.EXPLICIT, name == internal_listener)
    if (name := _given(header)) is not None:
        return ListenerChoice(name, ChoiceSource.HEADER, name == internal_listener)
    if socket_listener is not None:
        internal = socket_listener == internal_listener
        return ListenerChoice(socket_listener, ChoiceSource.SOCKET, internal)
    return ListenerChoice(internal_listener, ChoiceSource.INTERNAL, True)
