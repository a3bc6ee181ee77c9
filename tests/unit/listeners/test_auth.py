"""Authentication: token verification (every rejection case), key formats, the auth config keys,
client-certificate CNs, and the per-listener guard."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from pulsar_lookup_gateway.gateway import factories
from pulsar_lookup_gateway.listeners.auth import (
    AuthConfigError,
    AuthenticationFailed,
    Authenticator,
    Credentials,
    Identity,
    TlsAuthenticationProvider,
    TokenAuthenticationProvider,
    bearer_token,
    common_name,
    load_public_key,
    verified_peer_certificate,
)
from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import (
    ConfigError,
    GatewayConfig,
    parse_key_url,
    validate_raw,
)
from pulsar_lookup_gateway.lookup.errors import FailureKind, ServerError
from pulsar_lookup_gateway.lookup.selection import ChoiceSource, ListenerChoice

SECRET = bytes(range(32))
OTHER_SECRET = bytes(range(1, 33))
BASE = (
    "metadataStoreUrl=zk:127.0.0.1:2181\n"
    "advertisedListeners=internal:pulsar://10.0.0.1:6650,external:pulsar://gw.example.com:6650\n"
)


@dataclass(frozen=True)
class Keys:
    rsa: rsa.RSAPrivateKey
    ec256: ec.EllipticCurvePrivateKey

    def rsa_public(self, encoding: serialization.Encoding) -> bytes:
        return public_bytes(self.rsa, encoding)

    def ec_public(self, encoding: serialization.Encoding) -> bytes:
        return public_bytes(self.ec256, encoding)


def public_bytes(
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, encoding: serialization.Encoding
) -> bytes:
    return key.public_key().public_bytes(encoding, serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture(scope="module")
def keys() -> Keys:
    return Keys(
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
        ec.generate_private_key(ec.SECP256R1()),
    )


def hs256(claims: dict[str, Any], secret: bytes = SECRET) -> str:
    return jwt.encode(claims, secret, algorithm="HS256")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
    """A token with `alg: none` and an empty signature (CVE-2021-22160's shape)."""
    head = b64url(json.dumps(header or {"alg": "none", "typ": "JWT"}).encode())
    return f"{head}.{b64url(json.dumps(claims).encode())}."


def hmac_with(secret: bytes, claims: dict[str, Any]) -> str:
    """An HS256 token MAC'ed by hand with `secret` (PyJWT refuses a PEM key as HMAC secret;
    an attacker does not ask PyJWT)."""
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps(claims).encode())
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(mac)}"


def token_credentials(token: str | bytes) -> Credentials:
    return Credentials("token", token.encode() if isinstance(token, str) else token)


def reject(provider: TokenAuthenticationProvider, token: str | bytes) -> AuthenticationFailed:
    with pytest.raises(AuthenticationFailed) as info:
        provider.authenticate(token_credentials(token))
    if isinstance(token, str) and token:
        assert token not in str(info.value)  # a reason never echoes the credentials
    return info.value


# -- tokens: accepted ----------------------------------------------------------------------------


def test_hs256_token_gives_the_sub_role_and_its_expiry() -> None:
    provider = TokenAuthenticationProvider(SECRET, "HS256")
    exp = int(time.time()) + 3600
    identity = provider.authenticate(token_credentials(hs256({"sub": "alice", "exp": exp})))
    assert identity == Identity("alice", "token", float(exp))
    assert provider.authenticate(token_credentials(hs256({"sub": "bob"}))).expires_at is None


@pytest.mark.parametrize("algorithm", ["RS256", "PS256", "RS512"])
def test_rsa_tokens(keys: Keys, algorithm: str) -> None:
    public = load_public_key(keys.rsa_public(serialization.Encoding.DER), algorithm)
    provider = TokenAuthenticationProvider(public, algorithm)
    token = jwt.encode({"sub": "carol"}, keys.rsa, algorithm=algorithm)
    assert provider.authenticate(token_credentials(token)).role == "carol"


def test_es256_token(keys: Keys) -> None:
    public = load_public_key(keys.ec_public(serialization.Encoding.PEM), "ES256")
    provider = TokenAuthenticationProvider(public, "ES256")
    token = jwt.encode({"sub": "dave"}, keys.ec256, algorithm="ES256")
    assert provider.authenticate(token_credentials(token)).role == "dave"
    # the same claims signed by another EC key do not verify
    other = jwt.encode({"sub": "dave"}, ec.generate_private_key(ec.SECP256R1()), algorithm="ES256")
    assert reject(provider, other).code == "bad-signature"


def test_custom_role_and_audience_claims() -> None:
    provider = TokenAuthenticationProvider(
        SECRET, "HS256", role_claim="role", audience_claim="svc", audience="lookup-gw"
    )
    good = hs256({"role": "etl", "sub": "ignored", "svc": ["other", "lookup-gw"]})
    assert provider.authenticate(token_credentials(good)).role == "etl"
    assert provider.authenticate(token_credentials(hs256({"role": "x", "svc": "lookup-gw"})))
    # `aud` is not the configured audience claim, so naming the audience there does not count
    assert reject(provider, hs256({"role": "x", "aud": "lookup-gw"})).code == "wrong-audience"


def test_without_tokenaudience_any_audience_is_accepted() -> None:
    """Pulsar checks the audience only when tokenAudience is set (PyJWT by itself would refuse
    every token that has an `aud`)."""
    provider = TokenAuthenticationProvider(SECRET, "HS256")
    assert provider.authenticate(token_credentials(hs256({"sub": "a", "aud": "x"}))).role == "a"


# -- tokens: every rejection -------------------------------------------------------------------

NOW = int(time.time())


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda k: unsigned({"sub": "mallory"}), "wrong-algorithm"),
        (lambda k: unsigned({"sub": "mallory"}, {"alg": "None"}), "wrong-algorithm"),
        (lambda k: unsigned({"sub": "mallory"}, {"alg": "NONE", "typ": "JWT"}), "wrong-algorithm"),
        (lambda k: hs256({"sub": "a", "aud": "gw", "exp": NOW - 60}), "expired"),
        (lambda k: hs256({"sub": "a", "aud": "gw", "nbf": NOW + 3600}), "not-yet-valid"),
        (lambda k: hs256({"sub": "a", "aud": "gw", "iat": NOW + 3600}), "not-yet-valid"),
        (lambda k: hs256({"sub": "a", "aud": "other"}), "wrong-audience"),
        (lambda k: hs256({"sub": "a", "aud": ["x", "y"]}), "wrong-audience"),
        (lambda k: hs256({"sub": "a"}), "wrong-audience"),
        (lambda k: hs256({"sub": "a", "aud": "gw"}, OTHER_SECRET), "bad-signature"),
        (lambda k: hs256({"sub": "a", "aud": "gw"})[:-4] + "AAAA", "bad-signature"),
        (lambda k: jwt.encode({"sub": "a", "aud": "gw"}, SECRET + SECRET, "HS384"),
         "wrong-algorithm"),
        (lambda k: jwt.encode({"sub": "a", "aud": "gw"}, k.rsa, "RS256"), "wrong-algorithm"),
        (lambda k: hs256({"aud": "gw"}), "no-role"),
        (lambda k: hs256({"sub": "", "aud": "gw"}), "no-role"),
        (lambda k: hs256({"role": "a", "aud": "gw"}), "no-role"),
        (lambda k: "not.a.jwt", "malformed"),
        (lambda k: "garbage", "malformed"),
        (lambda k: "é".encode(), "malformed"),
        (lambda k: b"", "no-credentials"),
        (lambda k: hs256({"sub": "a", "aud": "gw", "exp": str(NOW + 3600)}), "malformed"),
        (lambda k: hs256({"sub": "a", "aud": "gw", "nbf": str(NOW - 60)}), "malformed"),
        (lambda k: hs256({"sub": "a", "aud": "gw", "iat": str(NOW - 60)}), "malformed"),
    ],
    ids=[
        "alg-none", "alg-None", "alg-NONE", "expired", "nbf-in-future", "iat-in-future",
        "wrong-audience", "audience-list-without-ours", "no-audience-claim", "wrong-secret",
        "tampered-signature", "hs384", "rs256-against-hs256", "no-sub", "empty-sub",
        "other-claim-only", "not-a-jwt", "garbage", "not-ascii", "empty", "exp-as-string",
        "nbf-as-string", "iat-as-string",
    ],
)  # fmt: skip
def test_hs256_rejections(keys: Keys, make: Callable[[Keys], str | bytes], code: str) -> None:
    provider = TokenAuthenticationProvider(SECRET, "HS256", audience="gw")
    failed = reject(provider, make(keys))
    assert failed.code == code, failed.reason
    assert failed.provider == "AuthenticationProviderToken"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                  max_size=3),
    max_leaves=8,
)  # fmt: skip
HEADERS = st.fixed_dictionaries(
    {"alg": st.sampled_from(["HS256", "none", "RS256", "", "HS512"]) | JSON}
) | st.dictionaries(st.text(max_size=5), JSON, max_size=3)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_only_fail_authentication(data: bytes) -> None:
    provider = TokenAuthenticationProvider(SECRET, "HS256", audience="gw")
    with pytest.raises(AuthenticationFailed):
        provider.authenticate(token_credentials(data))


@given(HEADERS, JSON, st.binary(max_size=40))
def test_arbitrary_jwt_shaped_tokens_only_fail_authentication(
    header: Any, claims: Any, signature: bytes
) -> None:
    token = ".".join(
        (b64url(json.dumps(header).encode()), b64url(json.dumps(claims).encode()),
         b64url(signature))
    )  # fmt: skip
    provider = TokenAuthenticationProvider(SECRET, "HS256")
    with pytest.raises(AuthenticationFailed):
        provider.authenticate(token_credentials(token))


def test_no_token_at_all() -> None:
    provider = TokenAuthenticationProvider(SECRET, "HS256")
    with pytest.raises(AuthenticationFailed) as info:
        provider.authenticate(Credentials("token", None))
    assert info.value.code == "no-credentials"


def test_key_confusion_hs256_token_against_an_rs256_key_is_refused(keys: Keys) -> None:
    """The classic: the attacker MACs a token with the (public!) RSA key as HMAC secret and
    sets alg HS256. The algorithm is pinned to RS256, so the header's choice is never used."""
    pem = keys.rsa_public(serialization.Encoding.PEM)
    der = keys.rsa_public(serialization.Encoding.DER)
    provider = TokenAuthenticationProvider(load_public_key(pem, "RS256"), "RS256")
    for secret in (pem, der):
        assert reject(provider, hmac_with(secret, {"sub": "admin"})).code == "wrong-algorithm"
    assert reject(provider, unsigned({"sub": "admin"})).code == "wrong-algorithm"
    # RS256 signed by another key
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode({"sub": "admin"}, other, algorithm="RS256")
    assert reject(provider, forged).code == "bad-signature"
    # ES256 against the RSA key
    es = jwt.encode({"sub": "admin"}, keys.ec256, algorithm="ES256")
    assert reject(provider, es).code == "wrong-algorithm"


def test_a_provider_refuses_a_key_of_the_wrong_kind(keys: Keys) -> None:
    public = load_public_key(keys.rsa_public(serialization.Encoding.PEM), "RS256")
    with pytest.raises(ValueError, match="public key"):
        TokenAuthenticationProvider(SECRET, "RS256")
    with pytest.raises(ValueError, match="shared secret"):
        TokenAuthenticationProvider(public, "HS256")


# -- key formats and loading -------------------------------------------------------------------


def data_url(data: bytes) -> str:
    return "data:;base64," + base64.b64encode(data).decode()


def config(text: str) -> GatewayConfig:
    return validate_raw(parse_properties(BASE + text, "test.conf")).config


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_raw(parse_properties(BASE + text, "test.conf"))
    return [str(p) for p in info.value.problems]


def token_provider(cfg: GatewayConfig) -> TokenAuthenticationProvider:
    (provider,) = factories.authenticator(cfg).providers
    assert isinstance(provider, TokenAuthenticationProvider)
    return provider


@pytest.mark.parametrize(
    ("url", "data"),
    [
        ("data:;base64,AAECAw==", b"\x00\x01\x02\x03"),
        ("data:application/octet-stream;base64,AAEC Aw==", b"\x00\x01\x02\x03"),
        ("DATA:;BASE64,AAECAw==", b"\x00\x01\x02\x03"),
        ("data:,plain%20text", b"plain text"),
    ],
)
def test_data_urls(url: str, data: bytes) -> None:
    assert parse_key_url(url).data == data


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("file:///etc/pulsar/secret.key", "/etc/pulsar/secret.key"),
        ("file:/etc/pulsar/secret.key", "/etc/pulsar/secret.key"),
        ("file://localhost/etc/a%20b.key", "/etc/a b.key"),
    ],
)
def test_file_urls(url: str, path: str) -> None:
    assert str(parse_key_url(url).path) == path


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("data:;base64", "needs a ','"),
        ("data:;base64,!!", "not valid base64"),
        ("data:;base64,", "holds no key"),
        ("file://host/etc/k", "not a local file URL"),
        ("file:relative/k", "absolute path"),
        ("file:///", "absolute path"),
        ("/etc/k", "expected data:;base64"),
        ("c2VjcmV0", "expected data:;base64"),
    ],
)
def test_bad_key_urls(url: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_key_url(url)


def test_secret_key_inline_and_from_a_file(tmp_path: Path) -> None:
    token = hs256({"sub": "alice"})
    inline = config(f"authenticationEnabled=true\nauthenticationProviders=token\n"
                    f"tokenSecretKey={data_url(SECRET)}\n")  # fmt: skip
    assert token_provider(inline).authenticate(token_credentials(token)).role == "alice"
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(SECRET)  # raw bytes, as `pulsar tokens create-secret-key` writes
    from_file = config(
        "authenticationEnabled=true\n"
        "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken\n"
        f"tokenSecretKey=file://{key_file}\n"
    )
    assert token_provider(from_file).authenticate(token_credentials(token)).role == "alice"
    assert token_provider(from_file).algorithm == "HS256"


@pytest.mark.parametrize("encoding", [serialization.Encoding.DER, serialization.Encoding.PEM])
def test_public_key_files_in_der_and_pem(
    tmp_path: Path, keys: Keys, encoding: serialization.Encoding
) -> None:
    key_file = tmp_path / "public.key"
    key_file.write_bytes(keys.rsa_public(encoding))
    cfg = config(
        "authenticationEnabled=true\nauthenticationProviders=token\n"
        f"tokenPublicKey=file://{key_file}\ntokenAuthClaim=role\n"
    )
    provider = token_provider(cfg)
    assert provider.algorithm == "RS256"  # Pulsar's default tokenPublicAlg
    token = jwt.encode({"role": "svc"}, keys.rsa, algorithm="RS256")
    assert provider.authenticate(token_credentials(token)).role == "svc"


def test_es256_public_key_inline(keys: Keys) -> None:
    cfg = config(
        "authenticationEnabled=true\nauthenticationProviders=token\ntokenPublicAlg=es256\n"
        f"tokenPublicKey={data_url(keys.ec_public(serialization.Encoding.DER))}\n"
    )
    provider = token_provider(cfg)
    assert provider.algorithm == "ES256"
    token = jwt.encode({"sub": "edge"}, keys.ec256, algorithm="ES256")
    assert provider.authenticate(token_credentials(token)).role == "edge"


def test_key_problems_found_when_loading_name_the_key(tmp_path: Path, keys: Keys) -> None:
    enabled = "authenticationEnabled=true\nauthenticationProviders=token\n"
    short = tmp_path / "short.key"
    short.write_bytes(b"0123456789")
    small_rsa = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    private_pem = keys.rsa.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    p384 = ec.generate_private_key(ec.SECP384R1())
    cases = [
        (f"tokenSecretKey=file://{tmp_path}/missing.key", "tokenSecretKey: cannot read"),
        (f"tokenSecretKey=file://{short}", "tokenSecretKey: an HS256 secret needs at least 32"),
        (f"tokenPublicKey={data_url(b'junk')}", "tokenPublicKey: not a public key"),
        (f"tokenPublicKey={data_url(private_pem)}", "tokenPublicKey: not a public key"),
        (
            f"tokenPublicKey={data_url(keys.ec_public(serialization.Encoding.DER))}",
            "tokenPublicAlg=RS256 needs an RSA public key",
        ),
        (
            f"tokenPublicKey={data_url(public_bytes(small_rsa, serialization.Encoding.DER))}",
            "the RSA key has 1024 bits",
        ),
        (
            f"tokenPublicAlg=ES256\ntokenPublicKey="
            f"{data_url(public_bytes(p384, serialization.Encoding.DER))}",
            "ES256 needs an EC public key on secp256r1",
        ),
    ]
    for line, fragment in cases:
        with pytest.raises(AuthConfigError) as info:
            factories.authenticator(config(enabled + line + "\n"))
        assert fragment in str(info.value), (line, str(info.value))


def test_keys_are_not_loaded_when_no_socket_requires_authentication(tmp_path: Path) -> None:
    cfg = config(f"authenticationProviders=token\ntokenSecretKey=file://{tmp_path}/none\n")
    authenticator = factories.authenticator(cfg)
    assert authenticator.providers == ()
    assert not authenticator.for_listener("external").required


# -- the auth config keys ----------------------------------------------------------------------

TOKEN_ON = "authenticationEnabled=true\nauthenticationProviders=token\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("authenticationEnabled=true\n",
         "authenticationProviders: authenticationEnabled=true needs at least one provider"),
        ("listener.external.authenticationRequired=true\n",
         "listener.external.authenticationRequired=true needs at least one provider"),
        ("authenticationProviders=token,basic\n",
         "authenticationProviders (test.conf:3): 'basic' is not a provider the gateway supports"),
        ("authenticationProviders=org.apache.pulsar.broker.authentication."
         "AuthenticationProviderBasic\n", "AuthenticationProviderBasic' is not a provider"),
        (TOKEN_ON, "tokenPublicKey: the token provider needs a key: tokenSecretKey"),
        (TOKEN_ON + "tokenSecretKey=c2VjcmV0\n", "tokenSecretKey (test.conf:5): expected data:"),
        (TOKEN_ON + "tokenSecretKey=data:;base64,c2VjcmV0\n",
         "tokenSecretKey (test.conf:5): an HS256 secret needs at least 32 bytes, this has 6"),
        (TOKEN_ON + "tokenSecretKey=file:///s\ntokenPublicKey=file:///p\n",
         "tokenPublicKey (test.conf:6): set tokenSecretKey (HS256) or tokenPublicKey, not both"),
        (TOKEN_ON + "tokenPublicKey=file:key.pem\n", "tokenPublicKey (test.conf:5): 'file:key"),
        ("tokenPublicAlg=HS256\n", "tokenPublicAlg (test.conf:3): 'HS256' is a shared-secret"),
        ("tokenPublicAlg=none\n", "tokenPublicAlg (test.conf:3): 'none' is not one of RS256"),
        ("tokenPublicAlg=EdDSA\n", "'EdDSA' is not one of"),
        ("tokenAuthClaim=\n", "tokenAuthClaim (test.conf:3): must name a claim"),
        ("tokenAudienceClaim= \n", "tokenAudienceClaim (test.conf:3): must name a claim"),
        ("authorizationEnabled=true\n",
         "authorizationEnabled (test.conf:3): authorization checks the authenticated role"),
        ("authenticationEnabled=maybe\n", "authenticationEnabled (test.conf:3)"),
        ("listener.external.authenticationRequired=perhaps\n",
         "listener.external.authenticationRequired (test.conf:3)"),
        ("listener.external.allowedListenerNames=internal,dmz\n",
         "listener.external.allowedListenerNames: 'dmz' is not declared in advertisedListeners"),
    ],
)  # fmt: skip
def test_auth_key_problems_name_the_key(text: str, expected: str) -> None:
    found = problems(text)
    assert len(found) == 1, found
    assert expected in found[0]


def test_auth_keys_accepted() -> None:
    cfg = config(
        "authenticationEnabled=true\n"
        "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderTls,"
        " token, org.apache.pulsar.broker.authentication.AuthenticationProviderToken\n"
        f"tokenSecretKey={data_url(SECRET)}\n"
        "superUserRoles=admin, ops\nauthorizationEnabled=true\n"
        "listener.internal.authenticationRequired=false\n"
        "listener.external.allowedListenerNames=external\n"
        "listener.internal.allowedListenerNames=\n"
    )
    assert cfg.authentication_providers == ("tls", "token")  # canonical, deduplicated
    assert cfg.super_user_roles == ("admin", "ops")
    assert cfg.authentication_required("external")  # the global setting
    assert cfg.authentication_required(None)
    assert not cfg.authentication_required("internal")  # its own
    assert cfg.settings_for("internal").allowed_listener_names == ()  # blank: none but its own
    assert cfg.settings_for("external").allowed_listener_names == ("external",)


def test_authentication_can_be_required_on_one_listener_only() -> None:
    cfg = config(
        "listener.external.authenticationRequired=true\nauthenticationProviders=token\n"
        f"tokenSecretKey={data_url(SECRET)}\nauthorizationEnabled=true\n"
    )
    authenticator = factories.authenticator(cfg)
    assert authenticator.for_listener("external").required
    assert not authenticator.for_listener("internal").required
    assert not authenticator.for_listener(None).required


# -- TLS: the client certificate's CN ---------------------------------------------------------


def self_signed(subject: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "issuer")]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.DER)


def der_of(cert: trustme.LeafCert) -> bytes:
    pem = cert.cert_chain_pems[0].bytes()
    loaded = x509.load_pem_x509_certificate(pem)
    return loaded.public_bytes(serialization.Encoding.DER)


def test_common_name_of_a_client_certificate() -> None:
    ca = trustme.CA()
    assert common_name(der_of(ca.issue_cert("client.example", common_name="spark-etl"))) == (
        "spark-etl"
    )
    organisation = x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acme")
    name = x509.NameAttribute(NameOID.COMMON_NAME, "role-é")
    assert common_name(self_signed(x509.Name([organisation, name]))) == "role-é"


@pytest.mark.parametrize(
    ("subject", "fragment"),
    [
        (x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acme")]), "has no CN"),
        (
            x509.Name(
                [
                    x509.NameAttribute(NameOID.COMMON_NAME, "a"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "b"),
                ]
            ),
            "has 2 CN",
        ),
    ],
)
def test_a_certificate_without_exactly_one_cn_has_no_role(
    subject: x509.Name, fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        common_name(self_signed(subject))
    with pytest.raises(AuthenticationFailed) as info:
        TlsAuthenticationProvider().authenticate(Credentials("tls", None, self_signed(subject)))
    assert info.value.code == "no-role"


def test_tls_provider() -> None:
    provider = TlsAuthenticationProvider()
    der = self_signed(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gw-client")]))
    assert provider.authenticate(Credentials(None, None, der)) == Identity("gw-client", "tls")
    with pytest.raises(AuthenticationFailed) as info:
        provider.authenticate(Credentials("tls", b"a token is no certificate", None))
    assert info.value.code == "no-credentials"
    with pytest.raises(ValueError, match="does not parse"):
        common_name(b"not DER")


def test_only_a_tls_session_gives_a_peer_certificate() -> None:
    assert verified_peer_certificate(None) is None
    assert verified_peer_certificate(object()) is None


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("Bearer abc.def.ghi", b"abc.def.ghi"),
        ("bearer   abc", b"abc"),
        ("Basic dXNlcjpwdw==", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("abc.def.ghi", None),
    ],
)
def test_bearer_token(header: str | None, token: bytes | None) -> None:
    assert bearer_token(header) == token


# -- the authenticator and the per-listener guard -----------------------------------------------


def authenticator(**kwargs: Any) -> Authenticator:
    providers = (TokenAuthenticationProvider(SECRET, "HS256"), TlsAuthenticationProvider())
    return Authenticator(providers, **kwargs)


CERT_OF_BOB = self_signed(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bob")]))


def test_a_named_method_uses_that_provider_only() -> None:
    auth = authenticator(enabled=True)
    token = hs256({"sub": "alice"}).encode()
    assert auth.authenticate(Credentials("token", token, CERT_OF_BOB)).role == "alice"
    assert auth.authenticate(Credentials("tls", token, CERT_OF_BOB)).role == "bob"
    with pytest.raises(AuthenticationFailed) as info:
        auth.authenticate(Credentials("basic", token))
    assert info.value.code == "unsupported-method"
    assert "'basic' is not enabled (enabled: token, tls)" in info.value.reason


def test_no_method_tries_every_provider_and_reports_the_telling_reason() -> None:
    auth = authenticator(enabled=True)
    assert auth.authenticate(Credentials(None, None, CERT_OF_BOB)).role == "bob"
    assert auth.authenticate(Credentials(None, hs256({"sub": "al"}).encode())).role == "al"
    with pytest.raises(AuthenticationFailed) as info:
        auth.authenticate(Credentials(None, hs256({"sub": "al"}, OTHER_SECRET).encode()))
    assert info.value.code == "bad-signature"  # not the TLS provider's "no certificate"
    with pytest.raises(AuthenticationFailed) as info:
        auth.authenticate(Credentials())
    assert info.value.code == "no-credentials"
    assert "accepted: token or tls" in info.value.reason


def test_authentication_metrics() -> None:
    registry = CollectorRegistry()
    auth = authenticator(enabled=True, registry=registry)
    auth.authenticate(Credentials("token", hs256({"sub": "a"}).encode()))
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(Credentials("token", hs256({"sub": "a", "exp": 1}).encode()))

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    token = {"provider_name": "AuthenticationProviderToken", "auth_method": "token"}
    assert sample("pulsar_authentication_success_total", **token) == 1.0
    assert sample("pulsar_authentication_failures_total", **token, reason="expired") == 1.0


def test_per_listener_requirement() -> None:
    auth = authenticator(enabled=True, required={"internal": False})
    external, internal, legacy = (auth.for_listener(n) for n in ("external", "internal", None))
    assert external.required and legacy.required and not internal.required
    # a socket that does not require authentication does not look at credentials at all
    assert internal.authenticate(Credentials("token", b"garbage")) is None
    with pytest.raises(AuthenticationFailed):
        external.authenticate(Credentials("token", b"garbage"))
    off = authenticator(required={"external": True})
    assert off.for_listener("external").required
    assert not off.for_listener("internal").required


def test_required_authentication_needs_a_provider() -> None:
    with pytest.raises(AuthConfigError, match="no provider"):
        Authenticator(enabled=True)
    with pytest.raises(AuthConfigError, match="no provider"):
        Authenticator(required={"x": True})
    assert not Authenticator().for_listener("x").required


@pytest.mark.parametrize(
    ("socket", "choice", "refused"),
    [
        ("external", ListenerChoice("external", ChoiceSource.EXPLICIT), False),
        ("external", ListenerChoice("public", ChoiceSource.EXPLICIT), False),
        ("external", ListenerChoice("internal", ChoiceSource.EXPLICIT), True),
        ("external", ListenerChoice("internal", ChoiceSource.HEADER), True),
        ("external", ListenerChoice("nope", ChoiceSource.HEADER), True),
        ("external", ListenerChoice("external", ChoiceSource.SOCKET), False),
        ("closed", ListenerChoice("closed", ChoiceSource.EXPLICIT), False),  # its own
        ("closed", ListenerChoice("external", ChoiceSource.EXPLICIT), True),
        ("internal", ListenerChoice("anything", ChoiceSource.EXPLICIT), False),  # unlimited
        (None, ListenerChoice("internal", ChoiceSource.EXPLICIT), False),  # legacy: unlimited
        (None, ListenerChoice("internal", ChoiceSource.INTERNAL), False),
    ],
)
def test_allowed_listener_names(socket: str | None, choice: ListenerChoice, refused: bool) -> None:
    auth = Authenticator(allowed_names={"external": ["public"], "closed": []})
    failure = auth.for_listener(socket).refusal(choice)
    assert (failure is not None) is refused
    if failure is not None:
        assert failure.kind is FailureKind.LISTENER_NOT_ALLOWED
        assert failure.code is ServerError.NotAllowedError
        assert f"listener '{choice.name}' may not be asked for" in failure.message


def test_identity_expiry() -> None:
    assert not Identity("a", "token").expired(1e12)
    assert not Identity("a", "token", 100.0).expired(99.9)
    assert Identity("a", "token", 100.0).expired(100.0)


def test_a_crit_header_never_reaches_a_reason_verbatim() -> None:
    # PyJWT quotes unsupported `crit` entries in its message: control characters must be escaped.
    token = jwt.encode(
        {"sub": "a", "aud": "gw"}, SECRET, "HS256", headers={"crit": ["x\nFORGED log line"]}
    )
    provider = TokenAuthenticationProvider(SECRET, "HS256", audience="gw")
    with pytest.raises(AuthenticationFailed) as failed:
        provider.authenticate(token_credentials(token))
    assert "\n" not in failed.value.reason
    assert "x\\nFORGED" in failed.value.reason  # escaped, still readable
