"""The authentication keys' values: provider names, token key formats and algorithms, the
broker link's client plugins. Parsed here; key files are read by the factories."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote, unquote_to_bytes, urlsplit

from pydantic import AfterValidator, BeforeValidator

from pulsar_lookup_gateway.listeners.config.listener_settings import CommaList, OptionalText

TOKEN_PROVIDER = "token"
TLS_PROVIDER = "tls"
_PULSAR_AUTH_PACKAGE = "org.apache.pulsar.broker.authentication."
#: authenticationProviders accepts Pulsar's class names and the short names.
PROVIDER_NAMES: Mapping[str, str] = {
    TOKEN_PROVIDER: TOKEN_PROVIDER,
    TLS_PROVIDER: TLS_PROVIDER,
    _PULSAR_AUTH_PACKAGE + "AuthenticationProviderToken": TOKEN_PROVIDER,
    _PULSAR_AUTH_PACKAGE + "AuthenticationProviderTls": TLS_PROVIDER,
}
#: tokenPublicAlg: the asymmetric JWS algorithms (RFC 7518) Pulsar's tokens use. HS* are not
#: here on purpose: an HMAC "public" key would let anyone who has it sign tokens.
PUBLIC_KEY_ALGORITHMS = (
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
)  # fmt: skip
SECRET_KEY_ALGORITHM = "HS256"  # tokenSecretKey, as in Pulsar
KEY_FORMATS = "data:;base64,<base64> or file:///absolute/path"


@dataclass(frozen=True, slots=True)
class KeyUrl:
    """A key given as Pulsar accepts it: inline (`data:[<type>][;base64],<data>`, RFC 2397) or
    a file (`file:///absolute/path`). Only parsed here; the file is read by listeners.auth."""

    data: bytes | None = None
    path: Path | None = None


def parse_key_url(value: str) -> KeyUrl:
    """Parse a tokenSecretKey / tokenPublicKey value; ValueError says what is wrong."""
    text = value.strip()
    if text[:5].lower() == "data:":
        meta, comma, payload = text[5:].partition(",")
        if not comma:
            raise ValueError(f"a data: URL needs a ',' before the data ({KEY_FORMATS})")
        if meta.lower().endswith(";base64"):
            try:
                data = base64.b64decode("".join(payload.split()), validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("the data: URL's data is not valid base64") from None
        else:
            data = unquote_to_bytes(payload)
        if not data:
            raise ValueError("the data: URL holds no key")
        return KeyUrl(data=data)
    if text[:5].lower() == "file:":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise ValueError(f"'{value}' is not a local file URL ({KEY_FORMATS})")
        path = unquote(parts.path)
        if not path.startswith("/") or path == "/":
            raise ValueError(f"'{value}' does not name an absolute path ({KEY_FORMATS})")
        return KeyUrl(path=Path(path))
    raise ValueError(f"expected {KEY_FORMATS}")


def canonical_providers(value: Any) -> Any:
    """authenticationProviders as short names (token, tls), each once; ValueError names the
    unknown ones."""
    if not isinstance(value, tuple):
        return value
    canonical: list[str] = []
    unknown: list[str] = []
    for name in value:
        short = PROVIDER_NAMES.get(name)
        if short is None:
            unknown.append(name)
        elif short not in canonical:
            canonical.append(short)
    if unknown:
        raise ValueError(
            "\n".join(
                f"'{name}' is not a provider the gateway supports: token or tls "
                f"({_PULSAR_AUTH_PACKAGE}AuthenticationProviderToken / ...Tls)"
                for name in unknown
            )
        )
    return tuple(canonical)


CLIENT_AUTH_PACKAGE = "org.apache.pulsar.client.impl.auth."
#: brokerClientAuthenticationPlugin: Pulsar's client plugin class names and short names; None
#: is no authentication.
BROKER_CLIENT_PLUGINS: Mapping[str, str | None] = {
    TOKEN_PROVIDER: TOKEN_PROVIDER,
    CLIENT_AUTH_PACKAGE + "AuthenticationToken": TOKEN_PROVIDER,
    CLIENT_AUTH_PACKAGE + "AuthenticationDisabled": None,
}


def _secret_key(value: str | None) -> str | None:
    if value is not None:
        data = parse_key_url(value).data
        if data is not None and len(data) < 32:
            # RFC 7518 3.2: an HS256 key has at least 256 bits (Pulsar makes 32 bytes).
            raise ValueError(f"an HS256 secret needs at least 32 bytes, this has {len(data)}")
    return value


def _key_url(value: str | None) -> str | None:
    if value is not None:
        parse_key_url(value)
    return value


def _public_algorithm(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    alg = value.strip().upper()
    if alg in PUBLIC_KEY_ALGORITHMS:
        return alg
    if alg.startswith("HS"):
        raise ValueError(
            f"'{value}' is a shared-secret algorithm: give the secret as tokenSecretKey "
            f"(HS256); tokenPublicAlg is one of {', '.join(PUBLIC_KEY_ALGORITHMS)}"
        )
    raise ValueError(f"'{value}' is not one of {', '.join(PUBLIC_KEY_ALGORITHMS)}")


def _claim_name(value: Any) -> Any:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("must name a claim")
        return value.strip()
    return value


# The keys' types: each checks its own value only.
Providers = Annotated[CommaList, AfterValidator(canonical_providers)]
SecretKeyUrl = Annotated[OptionalText, AfterValidator(_secret_key)]
KeyUrlText = Annotated[OptionalText, AfterValidator(_key_url)]
PublicAlgorithm = Annotated[str, BeforeValidator(_public_algorithm)]
ClaimName = Annotated[str, BeforeValidator(_claim_name)]
