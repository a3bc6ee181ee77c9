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
    """Every socket requires authentication, unless its listener's `authenticationRequired`
    says otherwise (see Security)."""
    authentication_providers: Providers = Field((), validate_default=True)
    """`token` and `tls` (or Pulsar's class names), tried in this order for a client that names
    no method."""
    token_secret_key: SecretKeyUrl = None
    """The HS256 secret that verifies tokens (`data:;base64,...` or `file:///path`, at least
    32 bytes); or give `tokenPublicKey`."""
    token_public_key: KeyUrlText = None
    """The public key (DER or PEM; `data:;base64,...` or `file:///path`) that verifies tokens,
    with `tokenPublicAlg`."""
    token_public_alg: PublicAlgorithm = "RS256"
    """The algorithm of `tokenPublicKey`: RS256/384/512, PS256/384/512 or ES256/384/512; the
    token's own `alg` header never chooses."""
    token_auth_claim: ClaimName = "sub"
    """The token claim that holds the role."""
    token_audience_claim: ClaimName = "aud"
    """The claim `tokenAudience` is looked for in."""
    token_audience: OptionalText = None
    """When set, a token must name this audience in its `tokenAudienceClaim` claim."""
    super_user_roles: CommaList = ()
    """Roles that may look up any topic, and read the listener table on a socket that requires
    authentication."""
    authenticate_metrics_endpoint: bool = True
    """On a socket that requires authentication, `/metrics` is for any authenticated role, as
    Pulsar's proxy has it (401 without credentials); false: open to anyone."""
    anonymous_user_role: OptionalText = None
    """The role requests forwarded to a broker (schemas, non-persistent topic lists,
    partitioned creation) are made for when their client proved none; unset: such requests are
    refused where the gateway authenticates to the brokers."""
    authorization_enabled: bool = Field(False, validate_default=True)
    """A role may look up a topic only when the namespace policies grant it produce or consume,
    it administers the tenant, or it is a superuser; needs authentication."""
