"""A real relay's connection (#15): the recorder against the simulated relay over plaintext, TLS
(a test CA, the authority override) and mTLS, with auth headers; certificates made at test time
(``certs.py``). Loopback only; every wait is bounded; servers stop in fixtures.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from certs import CLIENT_NAME, SERVER_NAME, Pki, make_pki
from relayfixtures import FAST, Running, read_streams, recorder_config, run_to_end, subscriptions

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis import replay
from cbi1kit.cli import main as relay_main
from cbi1kit.relay._core import WITHHELD
from cbi1kit.relay._recorder import Recorder
from cbi1kit.relay._session import PLANES, POOL_LOAD_METHOD
from cbi1kit.relay._transport import ClientTls, ServerTls
from cbi1kit.sim._feeds import ProducerFeed
from cbi1kit.sim._hub import ServerConfig
from cbi1kit.sim._server import RelayServer

ROOT = Path(__file__).parents[1]
Serve = Callable[..., RelayServer]
Recorders = Callable[..., Running]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_server(pki: Pki, *, mutual: bool) -> ServerConfig:
    tls = ServerTls.from_files(
        cert=pki.server_cert, key=pki.server_key, client_ca=pki.ca if mutual else None
    )
    return replace(FAST, tls=tls)


def client(pki: Pki, *, cert: bool = True) -> ClientTls:
    if not cert:
        return ClientTls.from_files(ca=pki.ca)
    return ClientTls.from_files(ca=pki.ca, cert=pki.client_cert, key=pki.client_key)


# ------------------------------------------------------------------------------ recording


def test_record_over_tls_with_the_authority_the_certificate_names(
    tmp_path: Path, pki: Pki, serve: Serve, recorders: Recorders
) -> None:
    """The server's certificate names relay.test only; the recorder dials 127.0.0.1 and checks
    the certificate against the authority it is given."""
    feed = ProducerFeed(steps=15, seed=21)
    srv = serve(feed, tls_server(pki, mutual=False))
    path = tmp_path / "c.kvrcap"
    cfg = recorder_config(
        srv.address, path, validate=True, tls=client(pki, cert=False), authority=SERVER_NAME
    )
    rec = recorders(cfg)
    run_to_end(srv, rec, feed)
    assert rec.report.exit_code == 0 and rec.report.violations == []
    streams = read_streams(path)
    assert {s.info["transport"] for s in streams} == {"tls"}
    assert {s.info["authority"] for s in streams} == {SERVER_NAME}
    assert {c.client for c in srv.calls} == {None}  # no client certificate asked for
    assert {c.method for c in srv.calls} >= {p.method.rsplit("/", 1)[1] for p in PLANES}
    result = replay(path)
    assert result.ok and result.final_sequence == feed.sequence == 15


def test_tls_without_the_authority_fails_the_name_check_and_gives_up(
    tmp_path: Path, pki: Pki, serve: Serve
) -> None:
    srv = serve(ProducerFeed(steps=1), tls_server(pki, mutual=False))
    path = tmp_path / "c.kvrcap"
    rec = Recorder(recorder_config(srv.address, path, tls=client(pki), give_up_after=0.5))
    report = rec.run()
    assert report.exit_code == 3 and report.stop_reason.startswith(f"relay {srv.address} unreach")
    assert srv.calls == [] and report.removed and not path.exists()  # nothing ever arrived


def test_record_over_mtls_and_the_server_knows_the_client(
    tmp_path: Path, pki: Pki, serve: Serve, recorders: Recorders
) -> None:
    feed = ProducerFeed(steps=12, seed=22)
    srv = serve(feed, tls_server(pki, mutual=True))
    path = tmp_path / "c.kvrcap"
    cfg = recorder_config(srv.address, path, validate=True, tls=client(pki), authority=SERVER_NAME)
    rec = recorders(cfg)
    run_to_end(srv, rec, feed)
    assert rec.report.exit_code == 0 and rec.report.violations == []
    assert {c.client for c in srv.calls} == {CLIENT_NAME}
    assert {s.info["transport"] for s in read_streams(path)} == {"mtls"}
    assert replay(path).ok


@pytest.mark.parametrize("who", ["no client certificate", "a stranger's certificate"])
def test_mtls_refuses_a_recorder_without_a_trusted_certificate(
    tmp_path: Path, pki: Pki, serve: Serve, capsys: pytest.CaptureFixture[str], who: str
) -> None:
    """One line, exit 3 (the relay is unreachable to this client), after --give-up-after."""
    srv = serve(ProducerFeed(steps=1), tls_server(pki, mutual=True))
    path = tmp_path / "c.kvrcap"
    argv = ["record", srv.address, "-o", str(path), "--ca-cert", str(pki.ca)]
    argv += ["--authority", SERVER_NAME, "--give-up-after", "0.5", "--quiet"]
    if who == "a stranger's certificate":
        argv += ["--client-cert", str(pki.other_client_cert)]
        argv += ["--client-key", str(pki.other_client_key)]
    assert relay_main(argv) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"cbi1kit record: error: relay {srv.address} unreachable"), err
    hint = "trusts --client-cert" if who.startswith("a stranger") else "needs --client-cert"
    assert hint in err
    assert srv.calls == []


def test_auth_headers_reach_every_call_and_stay_out_of_the_capture(
    tmp_path: Path, serve: Serve, recorders: Recorders
) -> None:
    feed = ProducerFeed(steps=8, seed=23)
    srv = serve(feed)
    path = tmp_path / "c.kvrcap"
    token = "Bearer s3cr3t-t0k3n-0451"
    headers = (("authorization", token), ("x-tenant", "team-a"))
    rec = recorders(recorder_config(srv.address, path, metadata=headers))
    run_to_end(srv, rec, feed)
    methods = {"GetRelayInfo", "SubscribeKvPool", *(p.method.rsplit("/", 1)[1] for p in PLANES)}
    assert {c.method for c in srv.calls} == methods
    for call in srv.calls:
        assert set(headers) <= set(call.metadata), call
    streams = read_streams(path)
    with open(path, "rb") as f:
        raw = f.read()
    assert token.encode() not in raw and b"s3cr3t" not in raw
    from cbi1kit.capture._file import RecordType, decode_stream_open
    from cbi1kit.capture._reader import CaptureReader

    with CaptureReader(path) as reader:
        opens = [
            decode_stream_open(r.body) for r in reader.records() if r.type is RecordType.STREAM_OPEN
        ]
    assert len(opens) == len(streams)
    assert all(o.metadata == (("authorization", WITHHELD), ("x-tenant", WITHHELD)) for o in opens)


def test_the_channel_keeps_upstreams_keepalive_and_the_authority(tmp_path: Path) -> None:
    """20 s / 10 s (relay.md §2.7); the authority is also the TLS name, without its port."""
    plain = Recorder(recorder_config("127.0.0.1:1", tmp_path / "a"))
    options = dict(plain.channel_options())
    assert options["grpc.keepalive_time_ms"] == 20_000
    assert options["grpc.keepalive_timeout_ms"] == 10_000
    assert options["grpc.http2.max_pings_without_data"] == 0
    assert "grpc.default_authority" not in options
    secure = Recorder(
        recorder_config("127.0.0.1:1", tmp_path / "b", tls=ClientTls(), authority="relay.test:443")
    )
    options = dict(secure.channel_options())
    assert options["grpc.default_authority"] == "relay.test:443"
    assert options["grpc.ssl_target_name_override"] == "relay.test"


# ------------------------------------------------------------------------------ the CLI


def test_record_and_serve_over_mtls_from_the_command_line(tmp_path: Path, pki: Pki) -> None:
    """``serve`` (a process) with its certificate, key and client CA; ``record`` with the CA,
    a client certificate and key, the authority and a header."""
    argv = [sys.executable, "-m", "cbi1kit", "serve", "--heartbeat", "0.2"]
    argv += ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    argv += ["--client-ca", str(pki.ca), "--duration", "60"]
    argv += ["--load-window", "0.1", "--readiness-heartbeat", "0.1"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert " over mTLS " in line, line
        address = line.split(" on ")[1].split()[0]
        path = tmp_path / "c.kvrcap"
        record = ["record", address, "-o", str(path), "--frames", "12", "--timeout", "5"]
        record += ["--ca-cert", str(pki.ca), "--client-cert", str(pki.client_cert)]
        record += ["--client-key", str(pki.client_key), "--authority", SERVER_NAME]
        record += ["--header", "Authorization: Bearer abc", "--quiet"]
        assert relay_main(record) == 0
        streams = read_streams(path)
        assert {s.info["transport"] for s in streams} == {"mtls"}
        assert len(subscriptions(path)[0].messages) == 12
        (load,) = (s for s in streams if s.method == POOL_LOAD_METHOD)
        assert {pb.KvPoolLoadUpdate.FromString(m).window_ms for m in load.messages} == {100}
    finally:
        proc.kill()
        proc.wait(10)
