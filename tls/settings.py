"""What one listener's TLS is made of: material and options, and the config key of each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: Each TLS setting and the broker.conf key that gives it (Pulsar's names). A listener may set
#: any of them as `listener.<name>.<key>`; the configuration builds TlsSettings from this table.
TLS_KEYS: Mapping[str, str] = {
    "certificate_file": "tlsCertificateFilePath",
    "key_file": "tlsKeyFilePath",
    "key_password": "tlsKeyPassword",
    "trust_certs_file": "tlsTrustCertsFilePath",
    "key_store_type": "tlsKeyStoreType",
    "key_store": "tlsKeyStore",
    "key_store_password": "tlsKeyStorePassword",
    "require_client_cert": "tlsRequireTrustedClientCertOnConnect",
    "protocols": "tlsProtocols",
    "ciphers": "tlsCiphers",
}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The TLS material and options of one socket: a listener's own keys over the global ones."""

    certificate_file: str | None = None
    key_file: str | None = None
    key_password: str | None = None
    trust_certs_file: str | None = None
    key_store_type: str = "PEM"
    key_store: str | None = None
    key_store_password: str | None = None
    require_client_cert: bool = False
    protocols: tuple[str, ...] = ()
    ciphers: tuple[str, ...] = ()
    refresh_seconds: int = 300
    #: setting -> the key its value came from (`listener.<name>.<key>` or the global key), for
    #: error messages; a setting missing here is named by its global key.
    keys: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def has_material(self) -> bool:
        if self.key_store_type == "PKCS12":
            return bool(self.key_store)
        return bool(self.certificate_file and self.key_file)

    def key(self, setting: str) -> str:
        """The config key that `setting` (a field of this class) came from."""
        return self.keys.get(setting) or TLS_KEYS[setting]
