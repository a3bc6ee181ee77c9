"""Turning off OpenSSL's server session cache on an SSLContext, which Python's ssl cannot do.

Why: TLS 1.2 resumes by session ID from the server session cache of the context a connection was
*created* with, the listening context. The server-name callback moves a handshake to the newest
context (SSL_set_SSL_CTX, tls.reload), but OpenSSL looks the offered session up before that
callback runs and in the listening context's cache, which also keeps the sessions of handshakes
served by later contexts. So a session verified with a trust file from before a rotation would be
resumed after it, skipping the new trust store. Tickets are off already (tls.context); with the
cache off too, a listener that checks client certificates resumes nothing, and every connection
gets a full handshake checked against the current trust store.

How: CPython's ``PySSLContext`` holds its ``SSL_CTX *`` right after the object header (CPython
3.10 to 3.13), and ``SSL_CTX_ctrl`` is reached through the ``_ssl`` extension's own libssl. Each
step is checked before the next: the layout guess is checked by reading the context's options
and verify mode through OpenSSL and comparing them with Python's view, the cache mode is read
back after it is set. When any check fails, nothing is written and `disable` returns False (the
caller logs it).
"""

from __future__ import annotations

import _ssl  # the extension module: the libssl it is linked with is the one in use
import ctypes
import ssl
import sys
import threading

__all__ = ["cache_mode", "disable"]

# OpenSSL 3 <openssl/ssl.h>
_SSL_CTRL_SET_SESS_CACHE_MODE = 44
_SSL_CTRL_GET_SESS_CACHE_MODE = 45
_SSL_SESS_CACHE_OFF = 0x0000

_LAYOUT_PYTHONS = ((3, 10), (3, 11), (3, 12), (3, 13))


class _Libssl:
    """The libssl functions needed, from the library the _ssl module is linked with."""

    def __init__(self) -> None:
        library = ctypes.CDLL(_ssl.__file__)
        self.ctrl = library.SSL_CTX_ctrl
        self.ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
        self.ctrl.restype = ctypes.c_long
        self.get_options = library.SSL_CTX_get_options
        self.get_options.argtypes = [ctypes.c_void_p]
        self.get_options.restype = ctypes.c_uint64
        self.get_verify_mode = library.SSL_CTX_get_verify_mode
        self.get_verify_mode.argtypes = [ctypes.c_void_p]
        self.get_verify_mode.restype = ctypes.c_int
        version = library.OpenSSL_version_num
        version.argtypes = []
        version.restype = ctypes.c_ulong
        if version() != ssl.OPENSSL_VERSION_NUMBER:
            raise OSError("the libssl found is not the one the ssl module uses")


_lock = threading.Lock()
_libssl: _Libssl | None = None
_unavailable: str | None = None


def _library() -> _Libssl:
    global _libssl, _unavailable
    with _lock:
        if _libssl is None and _unavailable is None:
            if sys.version_info[:2] not in _LAYOUT_PYTHONS:
                _unavailable = (
                    f"not checked with Python {sys.version_info[0]}.{sys.version_info[1]}"
                )
            elif ssl.OPENSSL_VERSION_INFO[0] != 3:
                _unavailable = f"not checked with {ssl.OPENSSL_VERSION}"
            else:
                try:
                    _libssl = _Libssl()
                except (OSError, AttributeError, ImportError) as exc:
                    _unavailable = f"libssl not reachable: {exc}"
        if _libssl is None:
            raise OSError(_unavailable)
        return _libssl


def _ssl_ctx(context: ssl.SSLContext, library: _Libssl) -> int:
    """The SSL_CTX pointer of `context`, after checking that what is read is one."""
    if not isinstance(context, ssl.SSLContext):
        raise OSError("not an ssl.SSLContext")
    if _ssl._SSLContext.__basicsize__ < object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p):
        raise OSError("unexpected _SSLContext layout")
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not pointer:
        raise OSError("unexpected _SSLContext layout")
    # The pointer must describe this very context: its options and verify mode as Python
    # sees them (OpenSSL's SSL_VERIFY_* flags: NONE 0, PEER 1, FAIL_IF_NO_PEER_CERT 2).
    expected_verify = {ssl.CERT_NONE: 0, ssl.CERT_OPTIONAL: 1, ssl.CERT_REQUIRED: 3}
    if library.get_options(pointer) != int(context.options) or (
        library.get_verify_mode(pointer) & 3 != expected_verify[context.verify_mode]
    ):
        raise OSError("the SSL_CTX found does not match the context")
    return pointer


def cache_mode(context: ssl.SSLContext) -> int:
    """The server session cache mode of `context` (SSL_SESS_CACHE_*; 0: off)."""
    library = _library()
    return int(library.ctrl(_ssl_ctx(context, library), _SSL_CTRL_GET_SESS_CACHE_MODE, 0, None))


def disable(context: ssl.SSLContext) -> str | None:
    """Turn `context`'s server session cache off: nothing is stored in it or resumed from it.
    None when done (read back), else why it could not be (nothing was changed then)."""
    try:
        library = _library()
        pointer = _ssl_ctx(context, library)
        library.ctrl(pointer, _SSL_CTRL_SET_SESS_CACHE_MODE, _SSL_SESS_CACHE_OFF, None)
        mode = library.ctrl(pointer, _SSL_CTRL_GET_SESS_CACHE_MODE, 0, None)
    except OSError as exc:
        return str(exc)
    if mode != _SSL_SESS_CACHE_OFF:
        return f"the session cache mode reads {mode:#x} after turning it off"
    return None
