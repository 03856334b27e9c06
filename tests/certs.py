"""Certificates made at test time (the ``cryptography`` package): a CA, a server certificate for
``relay.test`` only (so connecting to 127.0.0.1 needs the authority override), a client
certificate, and a second CA that signed neither.

Keys are derived from a seeded RNG (EC P-256 from a seeded integer), so every run has the same
keys; only the ECDSA signatures' nonces come from OpenSSL.
"""

from __future__ import annotations

import datetime
import random
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAME = "relay.test"
CLIENT_NAME = "cbi1kit-test-client"
_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551  # P-256 group order


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_client_cert: Path
    other_client_key: Path

    def read(self, name: str) -> bytes:
        path: Path = getattr(self, name)
        return path.read_bytes()


def _key(rng: random.Random) -> ec.EllipticCurvePrivateKey:
    return ec.derive_private_key(rng.randrange(1, _ORDER), ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    serial: int,
    *,
    ca: bool = False,
    dns: str | None = None,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer_name))
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if dns is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(
    path: Path, cert: x509.Certificate | None, key: ec.EllipticCurvePrivateKey | None
) -> Path:
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return path


def make_pki(folder: Path, seed: int = 15) -> Pki:
    rng = random.Random(seed)
    ca_key, other_key = _key(rng), _key(rng)
    server_key, client_key, stranger_key = _key(rng), _key(rng), _key(rng)
    ca = _cert("cbi1kit test CA", ca_key, None, 1, ca=True)
    other = _cert("another CA", other_key, None, 2, ca=True)
    issuer = ("cbi1kit test CA", ca_key)
    server = _cert(
        SERVER_NAME, server_key, issuer, 3, dns=SERVER_NAME, usage=ExtendedKeyUsageOID.SERVER_AUTH
    )
    client = _cert(CLIENT_NAME, client_key, issuer, 4, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    stranger = _cert(
        "stranger",
        stranger_key,
        ("another CA", other_key),
        5,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    folder.mkdir(parents=True, exist_ok=True)
    return Pki(
        ca=_write(folder / "ca.pem", ca, None),
        server_cert=_write(folder / "server.pem", server, None),
        server_key=_write(folder / "server.key", None, server_key),
        client_cert=_write(folder / "client.pem", client, None),
        client_key=_write(folder / "client.key", None, client_key),
        other_ca=_write(folder / "other-ca.pem", other, None),
        other_client_cert=_write(folder / "stranger.pem", stranger, None),
        other_client_key=_write(folder / "stranger.key", None, stranger_key),
    )
