"""A gateway in this process, made from config text, for the tests that need its objects."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from pulsar_lookup_gateway.gateway.process import Gateway
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig, validate_raw


def config_from(text: str, name: str = "test.conf") -> GatewayConfig:
    """The validated config of broker.conf text (ConfigError as `run` would report it)."""
    return validate_raw(parse_properties(text, name)).config


@contextlib.asynccontextmanager
async def running(config: GatewayConfig) -> AsyncIterator[Gateway]:
    """A started gateway, stopped however the block ends."""
    gateway = Gateway(config)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()
