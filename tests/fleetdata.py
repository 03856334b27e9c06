"""Small simulated fleet captures for the dataset and fleet tests: several DCs, two relays, one
capture with broken frames (violations), one written again as a rotated recording."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cbi1kit.capture import CaptureReader, CaptureWriter, RecordType, RotatingCaptureWriter
from cbi1kit.capture._file import decode_stream_close, decode_stream_open
from cbi1kit.sim import RelayConfig, SimRelayConfig, SimulatorConfig, simulate_capture
from cbi1kit.sim._workload import synthetic_chat

Writer = CaptureWriter | RotatingCaptureWriter


def copy_records(
    src: Path, writer_for: Callable[[Callable[[], tuple[int, int]]], Writer], *, mutate: Any = None
) -> Writer:
    """``src`` written again record by record (same bytes and receive times) through the writer
    ``writer_for(clock)`` makes; ``mutate(n, body)`` may change the n-th message's bytes."""
    now = [0, 0]
    messages = 0
    with CaptureReader(src) as reader, writer_for(lambda: (now[0], now[1])) as w:
        for rec in reader.records():
            now[:] = [rec.recv_unix_ns, rec.recv_mono_ns]
            t = {"recv_unix_ns": rec.recv_unix_ns, "recv_mono_ns": rec.recv_mono_ns}
            if rec.type is RecordType.STREAM_OPEN:
                o = decode_stream_open(rec.body)
                sid = w.open_stream(
                    o.target, o.method, o.request, metadata=o.metadata, info=o.info, **t
                )
                assert sid == rec.stream_id
            elif rec.type is RecordType.MESSAGE:
                body = rec.body if mutate is None else mutate(messages, bytes(rec.body))
                messages += 1
                w.message(rec.stream_id, body, **t)
            elif rec.type is RecordType.STREAM_CLOSE:
                c = decode_stream_close(rec.body)
                w.close_stream(
                    rec.stream_id,
                    status_code=c.status_code,
                    status_name=c.status_name,
                    details=c.details,
                    error_reason=c.error_reason,
                    local_reason=c.local_reason,
                    trailing_metadata=c.trailing_metadata,
                    **t,
                )
            elif rec.type is RecordType.MARK:
                w.write(RecordType.MARK, rec.body, **t)
    return w


def rotate_copy(src: Path, dst: Path, **rotation: Any) -> list[Path]:
    """``src`` as a rotated recording at ``dst`` (its segments' paths)."""
    w = copy_records(
        src,
        lambda clock: RotatingCaptureWriter(dst, clock=clock, set_id="0" * 31 + "1", **rotation),
    )
    assert isinstance(w, RotatingCaptureWriter)
    return list(w.paths)


def simulated(path: Path, *, dcs: int, seed: int, relay: int, requests: int = 120) -> Path:
    cfg = SimRelayConfig(
        SimulatorConfig(dcs=dcs, workers_per_dc=2, capacity_blocks=256, policy="ckf", seed=seed),
        RelayConfig(
            heartbeat_interval_ms=2_000, resubscribe_every_ms=30_000, drt_instance_id=relay
        ),
    )
    simulate_capture(synthetic_chat(requests, seed=seed), path, cfg)
    return path


def fleet_captures(root: Path) -> dict[str, Path]:
    """``a`` (2 DCs, relay 0xA), ``b`` (3 DCs, relay 0xB), ``broken`` (``a``'s relay and
    simulation with a CBI1 byte flipped in every 97th message: violations), ``rotated``
    (``b`` again as a rotated recording of 4+ segments: its first segment)."""
    root.mkdir(parents=True, exist_ok=True)
    a = simulated(root / "a.kvrcap", dcs=2, seed=1, relay=0xA)
    b = simulated(root / "b.kvrcap", dcs=3, seed=2, relay=0xB)
    plain = simulated(root / "c.src.kvrcap", dcs=2, seed=3, relay=0xA)

    def flip(n: int, body: bytes) -> bytes:
        if n % 97 != 50:
            return body
        at = len(body) - 3 if n % 2 else len(body) // 2  # the contract marker, or the payload
        return body[:at] + bytes([body[at] ^ 0x40]) + body[at + 1 :]

    broken = root / "broken.kvrcap"
    copy_records(plain, lambda clock: CaptureWriter(broken, clock=clock), mutate=flip)
    plain.unlink()
    (root / "rot").mkdir(exist_ok=True)
    rotated = rotate_copy(b, root / "rot" / "b.kvrcap", rotate_bytes=b.stat().st_size // 4)
    return {"a": a, "b": b, "broken": broken, "rotated": rotated[0]}
