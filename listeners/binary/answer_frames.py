"""LOOKUP_RESPONSE frames of answers with an address, made from the answer itself.

Lookups share few distinct answers (one per broker, listener and response kind), so each is
built once, as a template with a hole for the request id (the same template the lookup memo
keeps); after that a frame is the template around the id's varint."""

from __future__ import annotations

from pulsar_lookup_gateway.listeners.lookup_memo import AnswerTemplate
from pulsar_lookup_gateway.listeners.protocol import codec
from pulsar_lookup_gateway.listeners.protocol.codec import LookupType
from pulsar_lookup_gateway.listeners.protocol.wire import encode_varint
from pulsar_lookup_gateway.lookup.resolve import LookupAnswer, ResponseKind

_LOOKUP_TYPE = {
    ResponseKind.CONNECT: LookupType.Connect,
    ResponseKind.REDIRECT: LookupType.Redirect,
}
#: The widest request id a template takes (a varint of 9 bytes: ids below 2**63).
_TEMPLATE_ID_LIMIT = 2**63

_Key = tuple[ResponseKind, str | None, str | None, bool]


class AnswerFrames:
    LIMIT = 4096  # distinct answers kept; more (a huge cluster) starts over

    def __init__(self) -> None:
        self._templates: dict[_Key, AnswerTemplate] = {}

    def frame(self, request_id: int, answer: LookupAnswer) -> bytes:
        if request_id < _TEMPLATE_ID_LIMIT:
            return self.template(answer).frame(encode_varint(request_id))
        return codec.encode_command(_command(request_id, answer))

    def template(self, answer: LookupAnswer) -> AnswerTemplate:
        """The frame of `answer` with a hole for the request id."""
        urls = answer.urls
        key = (answer.response, urls.service_url, urls.service_url_tls, answer.authoritative)
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= self.LIMIT:
                self._templates.clear()
            template = self._templates[key] = AnswerTemplate.of(_command(0, answer))
        return template


def _command(request_id: int, answer: LookupAnswer) -> codec.BaseCommand:
    urls = answer.urls
    return codec.lookup_response_command(
        request_id,
        response=_LOOKUP_TYPE[answer.response],
        broker_url=urls.service_url,
        broker_url_tls=urls.service_url_tls,
        authoritative=answer.authoritative,
    )
