"""The gRPC connection to a relay: TLS material, call metadata, authority and keepalive.

Upstream's relay serves plaintext HTTP/2 and leaves mTLS, authorization and certificate rotation
to a sidecar proxy in front of it (upstream's ``docs/grpc-contract.md``, "Transport security
boundary"). A production recorder therefore talks to that proxy: server roots, a client
certificate and key, perhaps an authority the proxy routes on, and auth headers. Everything here
is read and checked before any connection is made (PEM files by the standard library's ``ssl``),
so a file that cannot be used is a :class:`TransportError` at once, not a handshake failing
until the recorder gives up.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cbi1kit.errors import TransportError, TransportVariant

#: Upstream's ``keepalive_interval_ms`` / ``keepalive_timeout_ms`` defaults (relay.md §2.7).
KEEPALIVE_TIME: Final = 20.0
KEEPALIVE_TIMEOUT: Final = 10.0

# grpc core's own rule for a legal non-binary header (``grpc_header_key_is_legal``, values
# ``grpc_header_nonbin_value_is_legal``)
_HEADER_KEY: Final = re.compile(r"[0-9a-z_.-]+")
_HEADER_VALUE: Final = re.compile(r"[\x20-\x7e]*")


def keepalive_options() -> list[tuple[str, int]]:
    """HTTP/2 keepalive as upstream's relay configures it: a ping after 20 s without traffic,
    the connection dropped when none is answered within 10 s; pings go on while streams are
    open and silent (a stalled stream is exactly when a dead peer must be noticed)."""
    return [
        ("grpc.keepalive_time_ms", int(KEEPALIVE_TIME * 1000)),
        ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT * 1000)),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def _read(path: Path, option: str, variant: TransportVariant) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TransportError(
            variant, f"cannot read {path}: {exc.strerror or exc}", field=option
        ) from None
    if not data.strip():
        raise TransportError(variant, f"{path} is empty", field=option)
    return data


def read_certificates(path: Path, option: str) -> bytes:
    """A PEM file of one or more certificates (roots, or a chain), checked by parsing."""
    data = _read(path, option, TransportVariant.Certificate)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cadata=data.decode("ascii"))
    except (UnicodeDecodeError, ssl.SSLError, ValueError):
        raise TransportError(
            TransportVariant.Certificate, f"{path} holds no PEM certificate", field=option
        ) from None
    return data


def read_key_pair(
    cert: Path, key: Path, *, cert_option: str, key_option: str
) -> tuple[bytes, bytes]:
    """A certificate chain and the unencrypted PEM private key of its first certificate."""
    chain = read_certificates(cert, cert_option)
    data = _read(key, key_option, TransportVariant.PrivateKey)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        # a password, so an encrypted key fails here instead of prompting (gRPC cannot use one)
        context.load_cert_chain(cert, key, password=b"")
    except ssl.SSLError as exc:
        why = (
            f"{key} is not the private key of {cert}"
            if exc.reason == "KEY_VALUES_MISMATCH"
            else f"{key} holds no unencrypted PEM private key"
        )
        raise TransportError(TransportVariant.PrivateKey, why, field=key_option) from None
    except OSError as exc:  # the file changed under us
        raise TransportError(
            TransportVariant.PrivateKey,
            f"cannot read {key}: {exc.strerror or exc}",
            field=key_option,
        ) from None
    return chain, data


@dataclass(frozen=True, slots=True)
class ClientTls:
    """A TLS client: ``root_certificates`` (``None``: the system's roots) and, for mTLS, a
    client certificate chain with its private key."""

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None

    @classmethod
    def from_files(
        cls,
        *,
        ca: Path | None = None,
        cert: Path | None = None,
        key: Path | None = None,
        options: Sequence[str] = ("--ca-cert", "--client-cert", "--client-key"),
    ) -> ClientTls:
        """Read and check the files; ``options`` name them in errors."""
        ca_option, cert_option, key_option = options
        if (cert is None) != (key is None):
            raise TransportError(
                TransportVariant.Pairing,
                f"{cert_option} and {key_option} go together",
                field=cert_option if cert is None else key_option,
            )
        roots = None if ca is None else read_certificates(ca, ca_option)
        if cert is None or key is None:
            return cls(roots)
        chain, private = read_key_pair(cert, key, cert_option=cert_option, key_option=key_option)
        return cls(roots, chain, private)

    def credentials(self) -> Any:
        """``grpc.ssl_channel_credentials`` of these roots and, for mTLS, the key pair."""
        import grpc

        return grpc.ssl_channel_credentials(
            self.root_certificates, self.private_key, self.certificate_chain
        )


@dataclass(frozen=True, slots=True)
class ServerTls:
    """A TLS server: its certificate chain and key; with ``client_ca``, clients must present a
    certificate it signed (mTLS)."""

    certificate_chain: bytes
    private_key: bytes
    client_ca: bytes | None = None

    @classmethod
    def from_files(
        cls,
        *,
        cert: Path | None,
        key: Path | None,
        client_ca: Path | None = None,
        options: Sequence[str] = ("--tls-cert", "--tls-key", "--client-ca"),
    ) -> ServerTls | None:
        """``None`` without files (plaintext); the files read and checked otherwise."""
        cert_option, key_option, ca_option = options
        if cert is None and key is None:
            if client_ca is not None:
                raise TransportError(
                    TransportVariant.Pairing,
                    f"{ca_option} needs {cert_option} and {key_option}",
                    field=ca_option,
                )
            return None
        if cert is None or key is None:
            raise TransportError(
                TransportVariant.Pairing,
                f"{cert_option} and {key_option} go together",
                field=cert_option if cert is None else key_option,
            )
        chain, private = read_key_pair(cert, key, cert_option=cert_option, key_option=key_option)
        roots = None if client_ca is None else read_certificates(client_ca, ca_option)
        return cls(chain, private, roots)

    def credentials(self) -> Any:
        """``grpc.ssl_server_credentials``; with ``client_ca``, a client certificate is required."""
        import grpc

        return grpc.ssl_server_credentials(
            [(self.private_key, self.certificate_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


def parse_header(text: str) -> tuple[str, str]:
    """``"name: value"`` as a metadata pair gRPC sends as given (the name lower-cased); binary
    (``-bin``), reserved (``grpc-``) and pseudo-headers are refused."""
    name, colon, value = text.partition(":")
    name, value = name.strip().lower(), value.strip()
    why = None
    if not colon:
        why = f"{text!r} is not NAME: VALUE"
    elif not _HEADER_KEY.fullmatch(name):
        why = f"header name {name!r} may hold only a-z, 0-9, '-', '_' and '.'"
    elif name.startswith("grpc-"):
        why = f"header name {name!r} is reserved by gRPC"
    elif name.endswith("-bin"):
        why = f"binary header {name!r} is not supported"
    elif not _HEADER_VALUE.fullmatch(value):
        why = f"the value of header {name!r} may hold only printable ASCII"
    if why is not None:
        raise TransportError(TransportVariant.Header, why, field="--header")
    return name, value


def authority_host(authority: str) -> str:
    """The host of ``host``, ``host:port`` or ``[v6]:port``: the name a certificate carries."""
    if authority.startswith("["):
        return authority[1 : authority.index("]")] if "]" in authority else authority
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


#: gRPC's name-resolver schemes (``scheme:rest``); a port they name is checked all the same
_GRPC_SCHEMES: Final = frozenset({"dns", "unix", "unix-abstract", "ipv4", "ipv6", "vsock"})


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` to serve on (``:9464``: loopback's port 9464; port 0: any free one)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise TransportError(TransportVariant.Target, f"{text!r} is no HOST:PORT", field="listen")
    return host.strip("[]") or "127.0.0.1", int(port)


def names_a_relay(target: str) -> bool:
    """Whether ``target`` is a relay to dial rather than a file (``watch`` and ``ck.live`` take
    either): no such path, a ``:`` in it, and an address :func:`parse_target` takes."""
    if ":" not in target or Path(target).exists():
        return False
    try:
        parse_target(target)
    except TransportError:
        return False
    return True


def parse_target(text: str) -> str:
    """A relay's address as gRPC dials it: ``host:port`` or ``host`` (port 443), an IPv6 host
    in brackets (a zone after ``%``), or a target with gRPC's scheme (``dns:///host:port``,
    ``unix:/path``); returned as given. A port outside 1..=65535 is refused: gRPC took it
    modulo 65536 and dialled another port."""
    scheme = re.fullmatch(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", text)
    if scheme is not None and scheme[1].lower() in _GRPC_SCHEMES:
        port = re.search(r":(\d+)$", scheme[2]) if scheme[1].lower() in ("dns", "ipv4") else None
        if port is None or 0 < int(port[1]) < 1 << 16:
            return text
    else:
        m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+(?:%[^\]]+)?\]|[^\s:/\[\]]+)(?::(\d{1,5}))?", text)
        if m is not None and (m[2] is None or 0 < int(m[2]) < 1 << 16):
            return text
    raise TransportError(
        TransportVariant.Target,
        f"{text!r} is not host:port (a port in 1..=65535) or a gRPC target (dns:///host:port)",
        field="target",
    )


def parse_authority(text: str) -> str:
    """An HTTP/2 ``:authority`` (``host`` or ``host:port``): printable, no spaces or slashes."""
    if not text or not re.fullmatch(r"[\x21-\x7e]+", text) or "/" in text:
        raise TransportError(
            TransportVariant.Authority, f"{text!r} is not a host or host:port", field="--authority"
        )
    return text
