"""The connection's settings (``relay/_transport``), checked before anything connects: TLS
files (certificates made at test time, ``certs.py``), headers, authorities."""

from __future__ import annotations

from pathlib import Path

import pytest
from certs import Pki, make_pki
from cliutil import cli_run, one_line
from errorcheck import raises_variant

from cbi1kit.errors import TransportError
from cbi1kit.relay._transport import (
    KEEPALIVE_TIME,
    KEEPALIVE_TIMEOUT,
    ClientTls,
    ServerTls,
    authority_host,
    keepalive_options,
    parse_authority,
    parse_header,
    parse_target,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_keepalive_is_upstreams() -> None:
    """relay.md §2.7: keepalive_interval_ms 20 000, keepalive_timeout_ms 10 000."""
    assert (KEEPALIVE_TIME, KEEPALIVE_TIMEOUT) == (20.0, 10.0)
    options = dict(keepalive_options())
    assert options["grpc.keepalive_time_ms"] == 20_000
    assert options["grpc.keepalive_timeout_ms"] == 10_000


@pytest.mark.parametrize(
    "text,name,value",
    [
        ("authorization: Bearer x y", "authorization", "Bearer x y"),
        ("X-Tenant:a", "x-tenant", "a"),
        ("x.y_z-1:  ", "x.y_z-1", ""),
    ],
)
def test_a_header_is_name_colon_value(text: str, name: str, value: str) -> None:
    assert parse_header(text) == (name, value)


@pytest.mark.parametrize(
    "text,why",
    [
        ("authorization", "is not NAME: VALUE"),
        ("bad name: x", "may hold only"),
        ("grpc-timeout: 1S", "reserved by gRPC"),
        ("token-bin: AAAA", "binary header"),
        ("x: caf\u00e9", "printable ASCII"),
        ("x: a\nb", "printable ASCII"),
    ],
)
def test_a_header_grpc_would_not_send_is_refused(text: str, why: str) -> None:
    with raises_variant(TransportError, "Header", match=why):
        parse_header(text)
    code, _, err = cli_run("record", "127.0.0.1:1", "--list", "--header", text)
    assert code == 2 and one_line(err) and why in err, err


def test_authorities() -> None:
    assert parse_authority("relay.test:443") == "relay.test:443"
    assert authority_host("relay.test:443") == "relay.test"
    assert authority_host("[::1]:443") == "::1"
    assert authority_host("relay.test") == "relay.test"
    for bad in ("", "a b", "a/b", "caf\u00e9"):
        with raises_variant(TransportError, "Authority"):
            parse_authority(bad)


def test_certificate_and_key_files_are_checked_before_anything_connects(
    pki: Pki, tmp_path: Path
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(pki.read("client_key"), None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    with raises_variant(TransportError, "PrivateKey", match="is not the private key of"):
        ClientTls.from_files(cert=pki.client_cert, key=pki.server_key)
    with raises_variant(TransportError, "PrivateKey", match="no unencrypted PEM private key"):
        ClientTls.from_files(cert=pki.client_cert, key=encrypted)
    with raises_variant(TransportError, "Certificate", match="holds no PEM certificate"):
        ClientTls.from_files(ca=pki.client_key)
    with raises_variant(TransportError, "Pairing"):
        ClientTls.from_files(cert=pki.client_cert)
    with raises_variant(TransportError, "Pairing"):
        ServerTls.from_files(cert=None, key=None, client_ca=pki.ca)
    with raises_variant(TransportError, "Pairing"):
        ServerTls.from_files(cert=None, key=pki.server_key)
    assert ServerTls.from_files(cert=None, key=None) is None
    mutual = ServerTls.from_files(cert=pki.server_cert, key=pki.server_key, client_ca=pki.ca)
    assert mutual is not None and mutual.client_ca == pki.read("ca")


@pytest.mark.parametrize(
    "target", ["127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:-1", "", ":50051", "dns:///h:99999"]
)
def test_a_relay_address_outside_the_port_range_is_a_usage_error(
    target: str, tmp_path: Path
) -> None:
    """gRPC took a port above 65535 modulo 65536: another port was dialled, and whatever
    listened there recorded. Refused before any connection or file."""
    with pytest.raises(TransportError) as info:
        parse_target(target)
    assert info.value.variant == "Target"
    out = tmp_path / "rec.kvrcap"
    code, _, err = cli_run("record", target, "-o", str(out), "--give-up-after", "1")
    assert code == 2 and one_line(err) and "1..=65535" in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:50051",
        "[::1]:8786",
        "[fe80::1%eth0]:50051",
        "relay.example.com",  # gRPC's default port, 443
        "DNS:///relay:50051",
        "unix:/run/relay.sock",
    ],
)
def test_a_relay_address_grpc_dials_as_given_is_kept(target: str) -> None:
    assert parse_target(target) == target
