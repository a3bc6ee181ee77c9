"""The one error TLS set-up raises."""

from __future__ import annotations


class TlsConfigError(Exception):
    """TLS material or options that cannot be used; the message names the key and the file."""
