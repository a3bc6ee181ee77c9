"""The routes' path patterns, and the topic a request's raw path names.

Topic routes read the topic from the *raw* request path: `%2F` inside the topic segment stays
part of that segment and is decoded exactly once, so a topic with a slash in its local name
reaches the name parser (and is refused with 400) instead of changing the route."""

from __future__ import annotations

import functools

from aiohttp import web

from pulsar_lookup_gateway.lookup.topics import TopicName

# Route segments: anything but a separator (aiohttp's default also refuses '{' and '}').
SEGMENT = r"[^/]+"
TOPIC_PATH = (
    f"{{domain:{SEGMENT}}}/{{tenant:{SEGMENT}}}/{{namespace:{SEGMENT}}}/{{topic:{SEGMENT}}}"
)
NAMESPACE_TOPICS = f"/admin/v2/namespaces/{{tenant:{SEGMENT}}}/{{namespace:{SEGMENT}}}/topics"
SCHEMA_PATH = (
    f"/admin/v2/schemas/{{tenant:{SEGMENT}}}/{{namespace:{SEGMENT}}}/{{topic:{SEGMENT}}}/schema"
)

# Parsing the path is a good part of a lookup's cost: parsed topic paths are cached, by count
# and by length (a client chooses the paths, up to aiohttp's 8 KiB request line, so only
# paths up to CACHED_PATH_LENGTH are kept, about 25 MiB at most).
TOPIC_CACHE_SIZE = 16_384
CACHED_PATH_LENGTH = 512


def topic_of(request: web.Request, *, trailing: int) -> TopicName:
    """The topic of a topic route whose path has `trailing` segments after the topic's."""
    raw_path = request.rel_url.raw_path
    if len(raw_path) > CACHED_PATH_LENGTH:  # parsed each time: the cache stays small in bytes
        return _parse_topic_path(raw_path, trailing)
    return _topic_of_path(raw_path, trailing)


@functools.lru_cache(maxsize=TOPIC_CACHE_SIZE)
def _topic_of_path(raw_path: str, trailing: int) -> TopicName:
    return _parse_topic_path(raw_path, trailing)


def _parse_topic_path(raw_path: str, trailing: int) -> TopicName:
    """The topic named by the four raw path segments that end `trailing` segments from the end.

    The router matched on a path where `%2F` is not a separator, so the raw segments line up with
    the route's. Pure, so cached per path (invalid names are not cached: they raise).
    """
    segments = raw_path.split("/")
    end = len(segments) - trailing
    domain, tenant, namespace, local = segments[end - 4 : end]
    return TopicName.from_rest(domain, tenant, namespace, local)


def schema_topic(request: web.Request) -> TopicName:
    """The topic of a schema route (`/admin/v2/schemas/<tenant>/<ns>/<topic>/schema...`, raw
    segments decoded once, as topic routes are); schemas are of persistent topics."""
    segments = request.rel_url.raw_path.split("/")
    tenant, namespace, local = segments[4:7]
    return TopicName.from_rest("persistent", tenant, namespace, local)
