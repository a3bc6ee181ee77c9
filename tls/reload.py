"""The TLS of a gateway's sockets: one context per listener, kept current while serving.

Each listener with TLS sockets gets a :class:`ListenerTls`: its material (its own
``listener.<name>.tls*`` keys over the global ones) loaded into an SSLContext that its
``pulsar+ssl://`` and ``https://`` servers listen with. Legacy TLS sockets
(``brokerServicePortTls``, ``webServicePortTls``) share one for "no listener".

Hot reload. Every ``tlsCertRefreshCheckDurationSec`` seconds (0: never) the sources are
fingerprinted; when that changed, the material is loaded and checked again and a complete NEW
context is built. Handshakes switch to the newest context as they start: the listening context's
``sni_callback`` (OpenSSL's server-name callback, which runs for every ClientHello, with or without
SNI) moves the connection to it (``SSLObject.context = ...``, OpenSSL's ``SSL_set_SSL_CTX``), which
replaces the certificate, key and trust store for that connection. Connections already
established keep theirs. When the new material does not load, nothing is swapped: new connections
keep getting the old certificate and an error naming the setting and file is logged (once per
change of the files).

Why not ``load_cert_chain`` on the live context: it does reach new handshakes, but (measured
with OpenSSL 3.0) a failed call leaves the context with the new certificate and no usable key, so
every later handshake fails; a key of another type (RSA -> ECDSA) goes into a slot of its own, so
clients can go on being served the old certificate; and a trust store can gain CAs but never lose
one. (Where client certificates are checked, session resumption is off, see tls.context: a
resumed session would skip the new trust store. That includes the server session cache: OpenSSL
looks a TLS 1.2 session ID up in the *listening* context's cache, before the callback moves the
handshake, and stores there the sessions of handshakes moved to newer contexts; see
tls.session_cache.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pulsar_lookup_gateway.tls.context import build_context, check_options, no_resumption
from pulsar_lookup_gateway.tls.errors import TlsConfigError
from pulsar_lookup_gateway.tls.material import (
    KeystoreProvider,
    Material,
    PemFiles,
    PemTrustFile,
    Pkcs12Keystore,
    TrustProvider,
)
from pulsar_lookup_gateway.tls.metrics import TlsMetrics, listener_label
from pulsar_lookup_gateway.tls.server_names import remember
from pulsar_lookup_gateway.tls.settings import TlsSettings

__all__ = ["GatewayTls", "ListenerTls", "sources_for"]

log = logging.getLogger(__name__)

#: A certificate expiring sooner than this is logged as a warning when loaded.
EXPIRY_WARNING = timedelta(days=14)


def sources_for(settings: TlsSettings) -> tuple[KeystoreProvider, TrustProvider | None]:
    """The keystore provider and trust source a listener's settings describe."""
    identity: KeystoreProvider
    if settings.key_store_type == "PKCS12":
        if not settings.key_store:
            raise TlsConfigError(
                f"{settings.key('key_store_type')}=PKCS12 needs {settings.key('key_store')}"
            )
        identity = Pkcs12Keystore(
            Path(settings.key_store),
            settings.key_store_password,
            settings.key("key_store"),
            settings.key("key_store_password"),
        )
    else:
        if not settings.certificate_file or not settings.key_file:
            raise TlsConfigError(
                f"TLS sockets need {settings.key('certificate_file')} and "
                f"{settings.key('key_file')} "
                f"(or {settings.key('key_store_type')}=PKCS12 and {settings.key('key_store')})"
            )
        identity = PemFiles(
            Path(settings.certificate_file),
            Path(settings.key_file),
            settings.key_password,
            settings.key("certificate_file"),
            settings.key("key_file"),
            settings.key("key_password"),
        )
    trust = (
        PemTrustFile(Path(settings.trust_certs_file), settings.key("trust_certs_file"))
        if settings.trust_certs_file
        else None
    )
    return identity, trust


@dataclass(frozen=True, slots=True)
class _Loaded:
    fingerprint: str
    material: Material
    context: ssl.SSLContext


class ListenerTls:
    """The TLS of one listener's sockets. `context` is what its servers listen with; each
    handshake is moved to the newest loaded context."""

    def __init__(
        self,
        listener: str | None,
        settings: TlsSettings,
        identity: KeystoreProvider,
        trust: TrustProvider | None = None,
        metrics: TlsMetrics | None = None,
    ) -> None:
        """Loads the material now; raises TlsConfigError naming the setting and file."""
        self.listener = listener
        self.settings = settings
        self.identity = identity
        self.trust = trust
        self.metrics = metrics
        self.where = f"listener '{listener}'" if listener is not None else "legacy TLS sockets"
        try:
            check_options(settings)
            self._state = self._load(self._fingerprint())
        except TlsConfigError as exc:
            raise TlsConfigError(f"{self.where}: {exc}") from None
        self._failed: str | None = None  # fingerprint of the last refused material
        self._checking = threading.Lock()  # one check at a time (they run in worker threads)
        self.context = self._state.context
        self.context.sni_callback = self._select
        # Set by GatewayTls.route_server_names: a server name -> the listener whose certificate
        # it gets, and every listener's TLS to find it in.
        self._route: Callable[[str], str | None] | None = None
        self._peers: Mapping[str | None, ListenerTls] = {}
        self._loaded(self._state.material, "loaded")

    @classmethod
    def from_settings(
        cls, listener: str | None, settings: TlsSettings, metrics: TlsMetrics | None = None
    ) -> ListenerTls:
        """The TLS of `listener`'s sockets (None: the legacy TLS sockets), as `settings`
        describe it; raises TlsConfigError naming the listener, the key and the file."""
        where = f"listener '{listener}'" if listener is not None else "legacy TLS sockets"
        try:
            identity, trust = sources_for(settings)
        except TlsConfigError as exc:
            raise TlsConfigError(f"{where}: {exc}") from None
        return cls(listener, settings, identity, trust, metrics)

    @property
    def material(self) -> Material:
        """The material new connections get."""
        return self._state.material

    @property
    def current(self) -> ssl.SSLContext:
        """The context new connections get."""
        return self._state.context

    def check(self) -> bool:
        """Load again if the sources changed; True when new connections now get new material.
        Blocking (reads files): run it in a thread."""
        with self._checking:
            return self._check()

    def _check(self) -> bool:
        fingerprint = self._fingerprint()
        if fingerprint == self._state.fingerprint:
            self._failed = None
            return False
        if fingerprint == self._failed:
            return False
        try:
            state = self._load(fingerprint)
        except TlsConfigError as exc:
            self._failed = fingerprint
            old = self._state.material
            log.error(
                "%s: the TLS material changed but cannot be used: %s; new connections keep "
                "getting the certificate loaded before (%s, expires %s)",
                self.where,
                exc,
                old.subject,
                old.not_after.isoformat(),
            )
            if self.metrics is not None:
                self.metrics.reloads.labels(listener_label(self.listener), "failed").inc()
            return False
        self._failed = None
        self._state = state
        self._loaded(state.material, "reloaded")
        if self.metrics is not None:
            self.metrics.reloads.labels(listener_label(self.listener), "ok").inc()
        return True

    def _fingerprint(self) -> str:
        trust = self.trust.fingerprint() if self.trust is not None else ""
        return f"{self.identity.fingerprint()}:{trust}"

    def _load(self, fingerprint: str) -> _Loaded:
        material = self.identity.load()
        trust_pem = self.trust.load() if self.trust is not None else None
        context = build_context(self.settings, material, trust_pem)
        return _Loaded(fingerprint, material, context)

    def _loaded(self, material: Material, verb: str) -> None:
        if self.metrics is not None:
            self.metrics.expiry.labels(listener_label(self.listener)).set(material.expiry_timestamp)
        log.info(
            "%s: %s TLS certificate %s (expires %s, sha256 %s) from %s",
            self.where,
            verb,
            material.subject,
            material.not_after.isoformat(),
            material.sha256[:16],
            material.origin,
        )
        left = material.not_after - datetime.now(UTC)
        if left < EXPIRY_WARNING:
            log.warning(
                "%s: the TLS certificate %s %s",
                self.where,
                material.subject,
                "has EXPIRED" if left.total_seconds() <= 0 else f"expires in {left}",
            )

    def _select(
        self, ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
    ) -> None:
        """OpenSSL's server-name callback, at every ClientHello: note the name, and serve the
        newest context of the listener the name routes to (this socket's when none)."""
        target = self
        if server_name and self._route is not None:
            target = self._peers.get(self._route(server_name), self)
        remember(ssl_object, server_name, target.listener, target.settings.require_client_cert)
        current = target._state.context
        if current is not context:
            ssl_object.context = current

    def ask_for_client_certificates(self) -> None:
        """Have handshakes on this listener's sockets ask for a client certificate (without
        requiring one), because one may be moved to a listener that checks them: a moved
        handshake keeps this context's verify mode. What a listener requires is enforced
        after the handshake (server_names.client_certificate_missing). A certificate offered
        is verified with the trust store of the listener the handshake reached."""
        context = self.context
        if context.verify_mode == ssl.CERT_NONE:
            context.verify_mode = ssl.CERT_OPTIONAL
        # No resumption where certificates are checked (see tls.context): a resumed session
        # would skip the check. This context's session cache is the one OpenSSL looks
        # sessions up in, for handshakes moved to any listener's context too.
        no_resumption(context)


class GatewayTls:
    """Every listener's TLS, and the task that re-checks the material."""

    def __init__(self, listeners: dict[str | None, ListenerTls], refresh_seconds: float) -> None:
        self.listeners = listeners
        self.refresh_seconds = refresh_seconds
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def load(
        cls,
        settings: Mapping[str | None, TlsSettings],
        metrics: TlsMetrics | None = None,
    ) -> GatewayTls:
        """Load the material of every listener in `settings` (None: the legacy TLS sockets);
        blocking: reads files. Raises TlsConfigError naming the listener, the key and the file.
        The re-check period is tlsCertRefreshCheckDurationSec, which every listener shares."""
        listeners = {
            name: ListenerTls.from_settings(name, own, metrics) for name, own in settings.items()
        }
        refresh = min((own.refresh_seconds for own in settings.values()), default=0)
        return cls(listeners, refresh)

    def context_for(self, listener: str | None) -> ssl.SSLContext:
        return self.listeners[listener].context

    def route_server_names(self, route: Callable[[str], str | None]) -> None:
        """Serve a handshake whose server name `route`s to a listener that has TLS material
        with that listener's certificate, on whichever TLS socket it arrives. Where any
        listener checks client certificates, every listener's sockets ask for one, since a
        handshake keeps the verify mode of the socket it arrived on."""
        checking = any(tls.context.verify_mode != ssl.CERT_NONE for tls in self.listeners.values())
        for tls in self.listeners.values():
            tls._route, tls._peers = route, self.listeners
            if checking:
                tls.ask_for_client_certificates()

    def start(self) -> None:
        """Start re-checking every refresh_seconds (nothing to do without TLS sockets or 0)."""
        if self._task is None and self.listeners and self.refresh_seconds > 0:
            self._task = asyncio.create_task(self._run(), name="tls-reload")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def check_now(self) -> list[str | None]:
        """Check every listener's material now; the listeners that got new material."""
        return await asyncio.to_thread(self._check_all)

    def _check_all(self) -> list[str | None]:
        return [name for name, tls in self.listeners.items() if tls.check()]

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                await self.check_now()
            except Exception:  # a bug must not end reloading for good
                log.exception("checking the TLS material failed")
