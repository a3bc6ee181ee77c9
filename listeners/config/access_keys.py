"""The authentication and authorization keys (Pulsar's): providers, token keys and claims,
super-users, and who may look up what."""

from __future__ import annotations

from pydantic import Field

from pulsar_lookup_gateway.listeners.config.auth_keys import (
    ClaimName,
    KeyUrlText,
    Providers,
    PublicAlgorithm,
    SecretKeyUrl,
)
from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup
from pulsar_lookup_gateway.listeners.config.listener_settings import CommaList, OptionalText


class AccessKeys(KeyGroup):
    authentication_enabled: bool = False
    authentication_providers: Providers = Field((), validate_default=True)
    token_secret_key: SecretKeyUrl = None  # HS256: data:;base64,... or file:///path
    token_public_key: KeyUrlText = None  # of tokenPublicAlg
    token_public_alg: PublicAlgorithm = "RS256"
    token_auth_claim: ClaimName = "sub"
    token_audience_claim: ClaimName = "aud"
    token_audience: OptionalText = None
    super_user_roles: CommaList = ()
    # /metrics on a socket requiring authentication: superUserRoles only (false: anyone).
    authenticate_metrics_endpoint: bool = True
    # The role requests forwarded to a broker are made for when their client proved none.
    anonymous_user_role: OptionalText = None
    authorization_enabled: bool = Field(False, validate_default=True)
