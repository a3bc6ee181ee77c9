"""Pulsar's admin routes the gateway answers: partitioned metadata, a namespace's topics and a
topic's schema, from the metadata store where it can, else asked of a broker over the broker
link (whose refusals are shown as the broker's REST answer). A schema or a broker's topic list
is held within the one byte budget from its read until it is written (http_api.held_answers)."""

from __future__ import annotations

import json

from aiohttp import web

from pulsar_lookup_gateway.brokers.answers import TOPIC_LIST_MODES, BrokerRefusal
from pulsar_lookup_gateway.brokers.link import BrokerLink, required
from pulsar_lookup_gateway.http_api.callers import Callers, principal
from pulsar_lookup_gateway.http_api.errors import (
    broker_error_response,
    failure_response,
    json_error,
)
from pulsar_lookup_gateway.http_api.held_answers import owner_of, send_held
from pulsar_lookup_gateway.http_api.schemas import schema_body, schema_refusal, version_bytes
from pulsar_lookup_gateway.http_api.topic_paths import schema_topic, topic_of
from pulsar_lookup_gateway.lookup.auto_creation import Partitions, TopicNotFound, topic_not_found
from pulsar_lookup_gateway.lookup.errors import LookupFailure
from pulsar_lookup_gateway.lookup.topics import is_system_service_namespace
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.serving.service import LookupService


class AdminRoutes:
    """The admin routes of one socket."""

    def __init__(
        self, service: LookupService, callers: Callers, broker_link: BrokerLink | None
    ) -> None:
        self.service = service
        self.callers = callers
        self.broker_link = broker_link  # None: requests only a broker can answer fail (503)

    def _link(self) -> BrokerLink:
        return required(self.broker_link)

    async def partitions(self, request: web.Request) -> web.Response:
        """The broker's rules (lookup.auto_creation): `checkAllowAutoCreation=true` lets a
        missing topic be created where the cluster allows it (a partitioned one by a broker);
        without it a missing topic is 404."""
        try:
            role = self.callers.role(request)
            topic = topic_of(request, trailing=1)
            creation = request.query.get("checkAllowAutoCreation", "").lower() == "true"
            decision = await self.service.partition_metadata(
                topic, client_creation=creation, role=role
            )
            if isinstance(decision, Partitions):
                return web.json_response({"partitions": decision.count})
            if isinstance(decision, TopicNotFound):
                raise topic_not_found(topic)
            answer = await self._link().partitioned_metadata(
                topic.full,
                auto_creation=decision.auto_creation,
                principal=principal(request, role),
            )
        except LookupFailure as failure:
            return failure_response(failure)
        if isinstance(answer, BrokerRefusal):
            return broker_error_response(answer)
        return web.json_response({"partitions": answer.count})

    async def namespace_topics(self, request: web.Request) -> web.StreamResponse:
        """`GET /admin/v2/namespaces/{tenant}/{namespace}/topics?mode=&includeSystemTopic=`, as
        Namespaces.getTopics: 404 for a missing namespace in every mode; the persistent topics
        (PERSISTENT, ALL) from the metadata store; the non-persistent ones (NON_PERSISTENT,
        ALL) from the brokers that own the namespace's bundles, as NamespacesBase.
        internalGetNonPersistentTopics asks each bundle's owner (an unowned bundle has none);
        system topics only with includeSystemTopic=true."""
        mode_name = request.query.get("mode", "PERSISTENT").upper()
        system = request.query.get("includeSystemTopic", "").lower() == "true"
        try:
            role = self.callers.role(request)  # (first: a stranger learns nothing of the rest)
            if mode_name not in TOPIC_LIST_MODES:
                return json_error(400, f"mode must be one of {', '.join(TOPIC_LIST_MODES)}")
            namespace = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
            # BrokerService.isSystemTopic: every topic of a system service namespace
            brokers = mode_name != "PERSISTENT" and (
                system or not is_system_service_namespace(namespace)
            )
            read = await self.service.namespaces.rest_topics(
                namespace,
                role=role,
                system=system,
                persistent=mode_name != "NON_PERSISTENT",
                holders=brokers,
            )
            if not brokers:
                return web.json_response(list(read.persistent))
            link = self._link()
        except LookupFailure as failure:
            return failure_response(failure)
        hold = link.held.hold(owner_of(request))
        try:
            try:
                answer = await link.non_persistent_topics(
                    str(read.namespace), read.holders, principal=principal(request, role), hold=hold
                )
            except LookupFailure as failure:
                return failure_response(failure)
            if isinstance(answer, BrokerRefusal):
                return broker_error_response(answer)
            body = json.dumps([*read.persistent, *answer.topics]).encode()
            del answer
            return await send_held(request, hold, body)
        finally:
            hold.release()

    async def schema(self, request: web.Request) -> web.StreamResponse:
        """`GET /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema[/{version}]`, asked of
        a broker over the binary protocol and shown as the broker's REST answer."""
        try:
            role = self.callers.role(request)  # (first: a stranger learns nothing of the rest)
            version = request.match_info.get("version")
            raw = version_bytes(version) if version is not None else None
        except ValueError as exc:
            return json_error(400, printable(str(exc)))
        except LookupFailure as failure:
            return failure_response(failure)
        try:
            topic = schema_topic(request)
            if role is not None:
                await self.service.authorize(topic, role)
            link = self._link()
        except LookupFailure as failure:
            return failure_response(failure)
        hold = link.held.hold(owner_of(request))
        try:
            try:
                answer = await link.schema(
                    topic.full, raw, principal=principal(request, role), hold=hold
                )
            except LookupFailure as failure:
                return failure_response(failure)
            if isinstance(answer, BrokerRefusal):
                return broker_error_response(schema_refusal(answer))
            body = schema_body(answer)
            del answer  # (only the body is held from here)
            return await send_held(request, hold, body)
        finally:
            hold.release()
