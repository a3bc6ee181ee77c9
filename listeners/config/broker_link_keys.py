"""The broker link's keys (Pulsar's proxy keys): how the gateway reaches a broker for what only
a broker can answer, and whose credentials it forwards."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, SecretStr, field_validator

from pulsar_lookup_gateway.listeners.config.auth_keys import (
    BROKER_CLIENT_PLUGINS,
    CLIENT_AUTH_PACKAGE,
)
from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup
from pulsar_lookup_gateway.listeners.config.listener_settings import OptionalText, blank_is_none


class BrokerLinkKeys(KeyGroup):
    broker_client_authentication_plugin: OptionalText = None
    """How the gateway authenticates to brokers over the broker link: `AuthenticationToken`
    (or `token`), or `AuthenticationDisabled`; unset: none."""
    broker_client_authentication_parameters: Annotated[
        SecretStr | None, BeforeValidator(blank_is_none)
    ] = Field(None, validate_default=True)
    """The plugin's parameters: `token:<jwt>` or `file:///path` (read at each new connection)."""
    broker_client_trust_certs_file_path: OptionalText = None
    """The CA the brokers' certificates must chain to, with `tlsEnabledWithBroker`."""
    tls_enabled_with_broker: bool = False
    """Reach brokers at their internal listener's `pulsar+ssl://` URL."""
    tls_hostname_verification_enabled: bool = False
    """Check that a broker's certificate names the host the gateway dialled."""
    forward_authorization_credentials: bool = False
    """Also send an authenticated client's token to the broker (`original_auth_data`)."""

    @field_validator("broker_client_authentication_plugin")
    @classmethod
    def _broker_client_plugin(cls, value: str | None) -> str | None:
        if value is None:
            return None
        plugin = BROKER_CLIENT_PLUGINS.get(value.strip())
        if plugin is None:
            raise ValueError(
                f"'{value}' is not a plugin the gateway supports: {CLIENT_AUTH_PACKAGE}"
                "AuthenticationToken (or token), or AuthenticationDisabled"
            )
        return plugin
