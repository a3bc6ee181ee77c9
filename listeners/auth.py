"""Authentication of lookup clients: Pulsar's token and TLS providers, required per listener.

What a client proves, and how (Pulsar's token and TLS providers, with Pulsar's keys):

- **token**: a JWT, in CONNECT's ``auth_data`` (``auth_method_name=token``) or in the HTTP header
  ``Authorization: Bearer <jwt>``. Verified with PyJWT against one pinned algorithm: HS256 with
  ``tokenSecretKey``, or ``tokenPublicAlg`` with ``tokenPublicKey``. The header's ``alg`` never
  chooses the algorithm, so ``alg: none`` and a token MAC'ed with the public key (key confusion)
  are refused. ``exp`` and ``nbf`` are checked when present (Pulsar's tokens often have no
  ``exp``); with ``tokenAudience`` set, the ``tokenAudienceClaim`` claim must name it. The role is
  the ``tokenAuthClaim`` claim (``sub``).
- **tls**: the client certificate of the TLS session, only when the session verified it against
  the socket's trust store (``tlsTrustCertsFilePath``); the role is the certificate's CN.

Which requests require it: ``listener.<name>.authenticationRequired``, else
``authenticationEnabled`` (legacy sockets: ``authenticationEnabled``), of the socket's listener
AND of the listener a request is answered for: a listener's requirement holds on every route
to it (a name the client gives, a TLS server name, the client's network). A request that
requires none ignores credentials: its client has no role and is not authorized either (a
trusted network). ``allowedListenerNames`` limits which names a socket's clients may ask for.

A client names its method (binary ``auth_method_name``, HTTP ``X-Pulsar-Auth-Method-Name``, or a
``Bearer`` header, which means token); a client that names none is tried against every
configured provider in order, as Pulsar's HTTP filter does.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import jwt
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry, Counter

from pulsar_lookup_gateway.listeners.config.auth_keys import (
    SECRET_KEY_ALGORITHM,
    TLS_PROVIDER,
    TOKEN_PROVIDER,
    parse_key_url,
)
from pulsar_lookup_gateway.lookup.errors import FailureKind, LookupFailure
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice
from pulsar_lookup_gateway.lookup.untrusted import printable
from pulsar_lookup_gateway.tls.server_names import served

__all__ = [
    "ANONYMOUS",
    "AuthConfigError",
    "AuthenticationFailed",
    "AuthenticationProvider",
    "Authenticator",
    "Credentials",
    "Identity",
    "ListenerGuard",
    "Principal",
    "TlsAuthenticationProvider",
    "TokenAuthenticationProvider",
    "bearer_token",
    "common_name",
    "load_public_key",
    "not_authenticated",
    "verified_peer_certificate",
]

log = logging.getLogger(__name__)

#: RFC 7518 §3.2: an HS256 key has at least 256 bits (Pulsar's `tokens create-secret-key` makes
#: 32 bytes). RSA keys below 2048 bits are refused too.
MIN_SECRET_BYTES = 32
MIN_RSA_BITS = 2048
_CURVES: Mapping[str, type[ec.EllipticCurve]] = {
    "ES256": ec.SECP256R1,
    "ES384": ec.SECP384R1,
    "ES512": ec.SECP521R1,
}
# Longest reason text taken from a client-controlled value (a method name).
_ECHO = 40


class AuthConfigError(Exception):
    """Authentication settings that cannot be used (a key that does not load); names the key."""


TIME_CLAIMS = ("exp", "nbf", "iat")  # RFC 7519 NumericDate claims


class AuthenticationFailed(Exception):
    """Credentials that do not prove a role. `reason` is safe to send to the client (it never
    holds the credentials); `code` is a short fixed label for metrics."""

    def __init__(
        self, reason: str, code: str, provider: str = "none", method: str = "none"
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.provider = provider
        self.method = method


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a client presented on one connection or request."""

    method: str | None = None  # the method it named ("token", "tls"); None: it named none
    data: bytes | None = None  # a token: binary auth_data, or an HTTP Bearer token
    peer_certificate: bytes | None = None  # DER; only from a TLS session that verified it


@dataclass(frozen=True, slots=True)
class Identity:
    role: str
    method: str
    expires_at: float | None = None  # the token's exp (seconds since the epoch), if any

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


@dataclass(frozen=True, slots=True)
class Principal:
    """The client a request forwarded to a broker is made for, as the broker is told it
    (CONNECT's original principal): its role (None: it proved none) and, to be forwarded
    where that is configured, the method and credentials it proved the role with."""

    role: str | None = None
    auth_method: str | None = None
    auth_data: str | None = None


#: A client that proved no role.
ANONYMOUS = Principal()


class AuthenticationProvider(Protocol):
    @property
    def method(self) -> str:
        """The auth method name clients use ("token", "tls")."""
        ...

    @property
    def provider_name(self) -> str:
        """Pulsar's provider class name, a metric label."""
        ...

    def authenticate(self, credentials: Credentials) -> Identity:
        """The identity the credentials prove; AuthenticationFailed if they prove none."""
        ...


# --- token ----------------------------------------------------------------------------------


class TokenAuthenticationProvider:
    """JWTs verified with one key and one pinned algorithm (AuthenticationProviderToken)."""

    method = TOKEN_PROVIDER
    provider_name = "AuthenticationProviderToken"

    def __init__(
        self,
        key: bytes | rsa.RSAPublicKey | ec.EllipticCurvePublicKey,
        algorithm: str,
        *,
        role_claim: str = "sub",
        audience_claim: str = "aud",
        audience: str | None = None,
    ) -> None:
        if algorithm == SECRET_KEY_ALGORITHM:
            if not isinstance(key, bytes):
                raise ValueError("HS256 verifies with a shared secret (bytes)")
        elif isinstance(key, bytes):
            raise ValueError(f"{algorithm} verifies with a public key, not a shared secret")
        self._key = key
        self.algorithm = algorithm
        self.role_claim = role_claim
        self.audience_claim = audience_claim
        self.audience = audience
        # Audience is checked below under its configured claim name, so PyJWT's own check (of
        # "aud" only, and failing any token that has one when no audience is configured) is off.
        self._jwt = jwt.PyJWT(options={"verify_aud": False, "verify_signature": True})

    def authenticate(self, credentials: Credentials) -> Identity:
        if not credentials.data:
            raise self._failed("no token was presented", "no-credentials")
        try:
            token = credentials.data.decode("ascii").strip()
        except UnicodeDecodeError:
            raise self._failed("the token is not a JWT (not ASCII text)", "malformed") from None
        try:
            claims = self._jwt.decode(token, self._key, algorithms=[self.algorithm], leeway=0)
        except jwt.ExpiredSignatureError:
            raise self._failed("the token has expired", "expired") from None
        except jwt.ImmatureSignatureError:
            raise self._failed("the token is not valid yet (nbf/iat)", "not-yet-valid") from None
        except jwt.InvalidAlgorithmError:
            raise self._failed(
                f"the token is not signed with {self.algorithm}, the only algorithm accepted",
                "wrong-algorithm",
            ) from None
        except jwt.InvalidSignatureError:
            raise self._failed("the token's signature does not verify", "bad-signature") from None
        except jwt.DecodeError:
            raise self._failed("the token is not a well-formed JWT", "malformed") from None
        except jwt.PyJWTError as exc:  # every other refusal of PyJWT's
            # Its message can quote the token's header (a `crit` entry): escaped and cut.
            raise self._failed(
                f"the token is not valid: {printable(str(exc))}", "invalid"
            ) from None
        self._check_times(claims)
        self._check_audience(claims)
        role = claims.get(self.role_claim)
        if not isinstance(role, str) or not role:
            raise self._failed(
                f"the token has no '{self.role_claim}' claim naming a role", "no-role"
            )
        exp = claims.get("exp")
        expires = float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None
        return Identity(role, self.method, expires)

    def _check_times(self, claims: Mapping[str, Any]) -> None:
        # PyJWT takes "exp": "9999999999" (a string) through int(); the expiry of such a token
        # would then never be enforced on a long-lived connection. Times are NumericDate only.
        for claim in TIME_CLAIMS:
            value = claims.get(claim)
            if claim in claims and (not isinstance(value, int | float) or isinstance(value, bool)):
                raise self._failed(f"the token's '{claim}' claim is not a number", "malformed")

    def _check_audience(self, claims: Mapping[str, Any]) -> None:
        if self.audience is None:
            return
        value = claims.get(self.audience_claim)
        audiences = [value] if isinstance(value, str) else value
        if not isinstance(audiences, list) or self.audience not in audiences:
            raise self._failed(
                f"the token's '{self.audience_claim}' claim does not name this audience",
                "wrong-audience",
            )

    def _failed(self, reason: str, code: str) -> AuthenticationFailed:
        return AuthenticationFailed(reason, code, self.provider_name, self.method)


def read_key(key: str, value: str) -> bytes:
    """The bytes of a key given as data:, file: or a path; AuthConfigError names `key`."""
    try:
        url = parse_key_url(value)
    except ValueError as exc:
        raise AuthConfigError(f"{key}: {exc}") from None
    if url.data is not None:
        return url.data
    assert url.path is not None
    try:
        data = Path(url.path).read_bytes()
    except OSError as exc:
        raise AuthConfigError(f"{key}: cannot read {url.path}: {exc.strerror or exc}") from None
    if not data:
        raise AuthConfigError(f"{key}: {url.path} is empty")
    return data


def load_public_key(
    data: bytes, algorithm: str, key: str = "tokenPublicKey"
) -> rsa.RSAPublicKey | ec.EllipticCurvePublicKey:
    """A public key in PEM, in DER (what Pulsar's `tokens create-key-pair` writes), or in
    base64 text of DER; checked to fit `algorithm` (RSA for RS*/PS*, the right curve for ES*)."""
    blobs = [data]
    if not data.lstrip().startswith(b"-----BEGIN"):
        with contextlib.suppress(binascii.Error, ValueError):
            blobs.append(base64.b64decode(b"".join(data.split()), validate=True))
    loaded: Any = None
    for blob in blobs:
        pem = blob.lstrip().startswith(b"-----BEGIN")
        try:
            if pem:
                loaded = serialization.load_pem_public_key(blob)
            else:
                loaded = serialization.load_der_public_key(blob)
            break
        except (ValueError, TypeError, UnsupportedAlgorithm):
            continue
    if loaded is None:
        raise AuthConfigError(
            f"{key}: not a public key (X.509 SubjectPublicKeyInfo in PEM, DER or base64 DER)"
        )
    if algorithm.startswith(("RS", "PS")):
        if not isinstance(loaded, rsa.RSAPublicKey):
            raise AuthConfigError(f"{key}: tokenPublicAlg={algorithm} needs an RSA public key")
        if loaded.key_size < MIN_RSA_BITS:
            raise AuthConfigError(
                f"{key}: the RSA key has {loaded.key_size} bits; at least {MIN_RSA_BITS} needed"
            )
        return loaded
    curve = _CURVES.get(algorithm)
    if curve is None:
        raise AuthConfigError(f"tokenPublicAlg: {algorithm} is not supported")
    if not isinstance(loaded, ec.EllipticCurvePublicKey) or not isinstance(loaded.curve, curve):
        raise AuthConfigError(
            f"{key}: tokenPublicAlg={algorithm} needs an EC public key on {curve.name}"
        )
    return loaded


# --- TLS ------------------------------------------------------------------------------------


class TlsAuthenticationProvider:
    """The role is the CN of the client certificate a TLS session verified
    (Pulsar's AuthenticationProviderTls)."""

    method = TLS_PROVIDER
    provider_name = "AuthenticationProviderTls"

    def authenticate(self, credentials: Credentials) -> Identity:
        if credentials.peer_certificate is None:
            raise AuthenticationFailed(
                "no client certificate verified by this TLS socket",
                "no-credentials",
                self.provider_name,
                self.method,
            )
        try:
            role = common_name(credentials.peer_certificate)
        except ValueError as exc:
            raise AuthenticationFailed(
                str(exc), "no-role", self.provider_name, self.method
            ) from None
        return Identity(role, self.method)


def common_name(der: bytes) -> str:
    """The subject CN of a DER certificate; ValueError when it has none, or more than one."""
    try:
        certificate = x509.load_der_x509_certificate(der)
    except ValueError:
        raise ValueError("the client certificate does not parse") from None
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    values = [n.value if isinstance(n.value, str) else n.value.decode() for n in names]
    if len(values) != 1 or not values[0]:
        found = "no" if not values else f"{len(values)}"
        raise ValueError(f"the client certificate's subject has {found} CN; one is needed")
    return values[0]


def verified_peer_certificate(ssl_object: object) -> bytes | None:
    """The DER client certificate of a TLS session, only if the session verified it: a socket
    without a trust store does not ask for one, and never lends an unverified one a role."""
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    # The dict form is empty when the certificate was not validated (Python's ssl docs).
    if not ssl_object.getpeercert():
        return None
    return ssl_object.getpeercert(binary_form=True)


def bearer_token(header: str | None) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` header (scheme case-insensitive)."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip().encode("ascii", errors="replace")


# --- the per-socket guard -------------------------------------------------------------------


def not_authenticated(reason: str) -> LookupFailure:
    return LookupFailure(FailureKind.NOT_AUTHENTICATED, f"Unable to authenticate: {reason}")


@dataclass(frozen=True, slots=True)
class ListenerGuard:
    """What one socket (tagged with `listener`) demands of its clients."""

    listener: str | None
    required: bool  # clients must authenticate
    allowed_names: frozenset[str] | None  # listener names a client may ask for; None: any
    authenticator: Authenticator
    # A listener with tlsRequireTrustedClientCertOnConnect that requests are answered for from
    # another socket: its TLS handshake must have served the connection, with a certificate.
    # (None: the socket's own handshake already enforced its rule.)
    certificate_of: str | None = None

    def certificate_missing(self, ssl_object: object) -> bool:
        """Whether the connection lacks the client certificate `certificate_of` requires:
        one verified by that listener's own TLS handshake (its trust store)."""
        listener = self.certificate_of
        if listener is None:
            return False
        record = served(ssl_object)
        if record is None or record.listener != listener:
            return True
        return verified_peer_certificate(ssl_object) is None

    def authenticate(self, credentials: Credentials) -> Identity | None:
        """The client's identity where authentication is required (None where it is not);
        AuthenticationFailed if its credentials prove no role."""
        if not self.required:
            return None
        return self.authenticator.authenticate(credentials)

    def joined(self, answering: ListenerGuard) -> ListenerGuard:
        """This socket's guard for requests answered for another listener: authentication is
        required where either requires it (a listener's requirement holds on every route to
        it: its name, a server name, a client network); the names allowed stay the socket's."""
        certified = self.authenticator.certificate_required
        certificate = answering.listener if answering.listener in certified else None
        if answering.required <= self.required and certificate is None:
            return self
        required = self.required or answering.required
        return ListenerGuard(
            self.listener, required, self.allowed_names, self.authenticator, certificate
        )

    def refusal(self, choice: ListenerChoice) -> LookupFailure | None:
        """Why a client of this socket may not ask for `choice` (None: it may). Only names a
        client gave are limited; the socket's own listener is always allowed."""
        if self.allowed_names is None:
            return None
        if choice.source is not ChoiceSource.EXPLICIT and choice.source is not ChoiceSource.HEADER:
            return None
        name = choice.name or ""
        if name == self.listener or name in self.allowed_names:
            return None
        # Which names are allowed is the operator's business, not a stranger's: not listed.
        return LookupFailure(
            FailureKind.LISTENER_NOT_ALLOWED,
            f"listener '{printable(name, 64)}' may not be asked for on this socket",
        )


class _Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        # Pulsar's names and labels.
        self.success = Counter(
            "pulsar_authentication_success",
            "Clients authenticated",
            ("provider_name", "auth_method"),
            registry=registry,
        )
        self.failures = Counter(
            "pulsar_authentication_failures",
            "Clients whose credentials proved no role",
            ("provider_name", "auth_method", "reason"),
            registry=registry,
        )


class Authenticator:
    """The configured providers, and which sockets require authentication."""

    def __init__(
        self,
        providers: Sequence[AuthenticationProvider] = (),
        *,
        enabled: bool = False,
        required: Mapping[str, bool] | None = None,
        allowed_names: Mapping[str, Iterable[str]] | None = None,
        certificate_required: Iterable[str] = (),
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`enabled`: the default requirement (authenticationEnabled); `required`: per listener
        name; `allowed_names`: per listener name, the listener names its clients may ask for."""
        self.providers = tuple(providers)
        self._by_method = {provider.method: provider for provider in self.providers}
        self.enabled = enabled
        self._required = dict(required or {})
        self._allowed = {name: frozenset(names) for name, names in (allowed_names or {}).items()}
        # Listeners whose TLS sockets require a trusted client certificate: a request answered
        # for one from another socket needs that listener's handshake (ListenerGuard.joined).
        self.certificate_required = frozenset(certificate_required)
        self.clock = clock
        self._metrics = _Metrics(registry) if registry is not None else None
        if (enabled or any(self._required.values())) and not self.providers:
            raise AuthConfigError(
                "authenticationProviders: authentication is required but no provider is set"
            )

    def for_listener(self, listener: str | None) -> ListenerGuard:
        required = self._required.get(listener, self.enabled) if listener else self.enabled
        allowed = self._allowed.get(listener) if listener else None
        return ListenerGuard(listener, required, allowed, self)

    def authenticate(self, credentials: Credentials) -> Identity:
        """The identity `credentials` prove. A named method uses that provider only; no method
        tries every provider in order. Raises AuthenticationFailed."""
        try:
            identity = self._authenticate(credentials)
        except AuthenticationFailed as failed:
            if self._metrics is not None:
                self._metrics.failures.labels(failed.provider, failed.method, failed.code).inc()
            raise
        if self._metrics is not None:
            provider = self._by_method[identity.method].provider_name
            self._metrics.success.labels(provider, identity.method).inc()
        return identity

    def _authenticate(self, credentials: Credentials) -> Identity:
        if credentials.method:
            provider = self._by_method.get(credentials.method)
            if provider is None:
                enabled = ", ".join(self._by_method) or "none"
                raise AuthenticationFailed(
                    f"authentication method '{printable(credentials.method, _ECHO)}' is not "
                    f"enabled (enabled: {enabled})",
                    "unsupported-method",
                )
            return provider.authenticate(credentials)
        failures: list[AuthenticationFailed] = []
        for provider in self.providers:
            try:
                return provider.authenticate(credentials)
            except AuthenticationFailed as failed:
                failures.append(failed)
        # The most telling reason: one about credentials the client did present.
        for failure in failures:
            if failure.code != "no-credentials":
                raise failure
        methods = " or ".join(self._by_method) or "none"
        raise AuthenticationFailed(
            f"no credentials were presented (accepted: {methods})", "no-credentials"
        )
