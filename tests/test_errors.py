"""The error families: variants, builtin compatibility per variant, pickling, names."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

import numpy as np
import pytest
from errorcheck import raises_variant

from cbi1kit import errors
from cbi1kit.capture import CaptureSet, CaptureWriter, RecordType, RotatingCaptureWriter
from cbi1kit.capture._file import MAX_BODY_LEN
from cbi1kit.capture._segments import capture_segments
from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._consumer import CkfLaneTable, check_verification_window, search_prefix_depths
from cbi1kit.ckf._lane import Lane
from cbi1kit.ckf._limits import verification_window_fault
from cbi1kit.ckf._producer import CkfConfig, DcCkfPublisher, DcCkfState
from cbi1kit.ckf._table import CuckooTable, SplitMix64
from cbi1kit.errors import (
    CaptureError,
    Cbi1Error,
    Cbi1Variant,
    DatasetVariant,
    RelayWireError,
    error_name,
)
from cbi1kit.fleet._cluster import client
from cbi1kit.fleet._queries import QUERIES, run_local
from cbi1kit.hashing._identity import LaneLease, ProducerIdentity
from cbi1kit.hashing._pools import (
    CacheSemanticsId,
    DcId,
    IdentitySource,
    IndexerDomainId,
    PoolId,
    RoutingScopeId,
)
from cbi1kit.wire._assembly import AssembledSnapshot, SnapshotAssembly
from cbi1kit.wire._format import FilterFormat

FAMILIES = [
    getattr(errors, n)
    for n in errors.__all__
    if n.endswith("Error") and n != "Cbi1kitError" and "Variant" in getattr(errors, n).__dict__
]


def test_front_of_the_module_lists_every_family() -> None:
    assert all(issubclass(f, errors.Cbi1kitError) for f in FAMILIES)
    assert 10 <= len(FAMILIES) <= 20
    assert all(issubclass(f.Variant, StrEnum) for f in FAMILIES)
    assert {f"{f.__name__[:-5]}Variant" for f in FAMILIES} <= set(errors.__all__)


def test_a_variant_is_its_familys_enum_and_a_typo_is_refused() -> None:
    err = Cbi1Error(Cbi1Variant.Checksum, "bad", offset=4)
    assert err.variant is Cbi1Variant.Checksum and err.variant == "Checksum"
    assert Cbi1Error("Checksum").variant is Cbi1Variant.Checksum  # a name is looked up
    with pytest.raises(ValueError, match="Chcksum"):
        Cbi1Error("Chcksum")
    with pytest.raises(ValueError, match="Conflict"):  # another family's variant
        Cbi1Error(DatasetVariant.Conflict)


def test_a_subvariant_names_upstreams_nested_variant() -> None:
    err = Cbi1Error(
        Cbi1Variant.Format,
        subvariant="Mismatch",
        offset=12,
        field="header.seed",
        expected=1,
        actual=(2, 4),
    )
    assert (err.variant, err.subvariant, err.variant_path) == (
        "Format",
        "Mismatch",
        "Format.Mismatch",
    )
    assert str(err).startswith("format mismatch at header.seed (offset 12)")
    assert err.name == "Cbi1Error.Format"


def test_a_variant_that_is_a_builtin_error_is_a_fixed_subclass_of_its_family() -> None:
    torn = CaptureError("Truncated", "cut", offset=8, record_index=2, source="c.kvrcap")
    corrupt = CaptureError("Corrupt", "bad magic", offset=0, record_index=0, source="c.kvrcap")
    assert type(torn) is errors.CaptureEOF and isinstance(torn, EOFError)
    assert type(corrupt) is CaptureError and not isinstance(corrupt, EOFError)
    assert torn.name == "CaptureError.Truncated" and torn.family() is CaptureError
    assert type(Cbi1Error(Cbi1Variant.Truncated)) is errors.Cbi1EOF
    mixins = [getattr(errors, n) for n in errors.__all__ if not n.endswith(("Error", "Variant"))]
    assert all(m.__module__ == "cbi1kit.errors" for m in mixins if isinstance(m, type))


@pytest.mark.parametrize(
    "err",
    [
        Cbi1Error("Truncated", "short", offset=0, field="header", expected=48, actual=3),
        Cbi1Error(Cbi1Variant.Format, subvariant="Mismatch", field="h.seed", expected=1, actual=2),
        RelayWireError("ContractMarker", "FilterUpdate.contract_marker", expected=1, actual=2),
        RelayWireError("UnsupportedCkfFormat", "F.fingerprint_bits", actual=8, slots_per_bucket=4),
        CaptureError("Truncated", "cut", offset=8, record_index=2, source="c.kvrcap"),
    ],
    ids=lambda e: e.variant_path,
)
def test_every_family_pickles_to_the_same_error(err: errors.Cbi1kitError) -> None:
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is type(err)
    assert (again.variant_path, str(again), again.field, again.context) == (
        err.variant_path,
        str(err),
        err.field,
        err.context,
    )


def test_error_name_names_foreign_errors_by_class() -> None:
    assert error_name(ValueError("x")) == "ValueError"
    assert error_name(RelayWireError("Payload", "FilterUpdate.payload")) == "RelayWireError.Payload"


def test_the_command_lines_error_is_a_family_named_by_its_exit_code() -> None:
    """``CliError(message, code)`` is under the root like every error the package raises; its
    variant names the README's exit code, and it pickles as any family does."""
    err = errors.CliError("--seed and --buckets go together", 2)
    assert isinstance(err, errors.Cbi1kitError) and err.variant is errors.CliVariant.Usage
    assert (str(err), err.code, error_name(err)) == (
        "--seed and --buckets go together",
        2,
        "CliError.Usage",
    )
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is errors.CliError and (str(again), again.code) == (str(err), 2)
    assert {errors.CLI_EXIT_CODES[v] for v in errors.CliVariant} == {1, 2, 3, 130}
    with pytest.raises(ValueError, match="no exit code 7"):
        errors.CliError("x", 7)


class _Huge:
    """A record body whose length alone is past the limit (the writer refuses it unread)."""

    def __len__(self) -> int:
        return MAX_BODY_LEN + 1


def _in_writer(call: Callable[[CaptureWriter], object]) -> Callable[[Path], object]:
    """``call`` on a new capture writer at the path (closed after)."""

    def run(path: Path) -> object:
        with CaptureWriter(path) as w:
            return call(w)

    return run


FMT = CkfConfig(64, seed=5).format()
OTHER = CkfConfig(256, seed=5)
SCOPE = RoutingScopeId(b"\x00" * 16, IdentitySource.EXPLICIT)
POOL = PoolId(
    IndexerDomainId(CacheSemanticsId(b"\x01" * 16, IdentitySource.EXPLICIT), SCOPE), DcId(1)
)
IDENT = ProducerIdentity(pool_id=POOL, producer_incarnation=1, layout_generation=1, format=FMT)
LEASE = LaneLease(consumer_instance=7, physical_lane=2, assignment_epoch=1)
ADDRESSING = CkfAddressing(seed=FMT.seed, bucket_count=FMT.bucket_count)
ASSEMBLED = AssembledSnapshot(1, 64, np.zeros(64, np.uint64), [(0, 64)])
USAGE = (CaptureError, "Usage")
CKF = (errors.CkfError, "Usage")
LANE_ARRAY = (Cbi1Error, "LaneArray")
CLUSTER = (errors.FleetError, "Cluster")

#: each call that once refused an argument with a plain ``ValueError``: the call (given a path
#: it may write), its family and variant, the argument it names, and the message, unchanged
BAD_ARGUMENTS = [
    pytest.param(
        lambda p: CaptureWriter(p, flush_records=0),
        *USAGE,
        "flush_records",
        "flush_records must be >= 1",
        id="CaptureWriter.flush_records",
    ),
    pytest.param(
        lambda p: CaptureWriter(p, mode="w"),
        *USAGE,
        "mode",
        "mode must be 'x' or 'a', got 'w'",
        id="CaptureWriter.mode",
    ),
    pytest.param(
        _in_writer(lambda w: (w.close(), w.mark("late"))),
        *USAGE,
        None,
        "capture writer is closed",
        id="CaptureWriter.closed",
    ),
    pytest.param(
        _in_writer(lambda w: w.write(RecordType.MARK, _Huge())),  # type: ignore[arg-type]
        *USAGE,
        "body",
        f"record body of {MAX_BODY_LEN + 1} bytes exceeds {MAX_BODY_LEN}",
        id="CaptureWriter.body",
    ),
    pytest.param(
        _in_writer(lambda w: w.open_stream("t", "m", b"", stream_id=0)),
        *USAGE,
        "stream_id",
        "stream 0 is open or not a stream id",
        id="CaptureWriter.open_stream",
    ),
    pytest.param(
        _in_writer(lambda w: w.message(5, b"")),
        *USAGE,
        "stream_id",
        "stream 5 is not open",
        id="CaptureWriter.message",
    ),
    pytest.param(
        lambda p: RotatingCaptureWriter(p, rotate_bytes=0),
        *USAGE,
        "rotate_bytes",
        "rotate_bytes must be >= 1",
        id="RotatingCaptureWriter.rotate_bytes",
    ),
    pytest.param(
        lambda p: RotatingCaptureWriter(p, rotate_seconds=0),
        *USAGE,
        "rotate_seconds",
        "rotate_seconds must be > 0",
        id="RotatingCaptureWriter.rotate_seconds",
    ),
    pytest.param(
        lambda p: RotatingCaptureWriter(p, mode="w"),
        *USAGE,
        "mode",
        "mode must be 'x' or 'a', got 'w'",
        id="RotatingCaptureWriter.mode",
    ),
    pytest.param(
        lambda p: capture_segments([]),
        *USAGE,
        "source",
        "no capture segments given",
        id="capture_segments",
    ),
    pytest.param(
        lambda p: CaptureSet([]),
        *USAGE,
        "paths",
        "a capture set needs at least one segment",
        id="CaptureSet",
    ),
    pytest.param(
        lambda p: CkfLaneTable(FMT, pools={0: POOL}, configured_lanes=0b10),
        *CKF,
        "configured_lanes",
        "configured_lanes disagrees with the lanes of pools",
        id="CkfLaneTable.configured_lanes",
    ),
    pytest.param(
        lambda p: check_verification_window(0),
        *CKF,
        "verification_window",
        f"verification_window {verification_window_fault(0)}, got 0",
        id="check_verification_window",
    ),
    pytest.param(
        lambda p: search_prefix_depths(1, 1, 4, lambda _p: 1, lanes=0),
        *CKF,
        "lanes",
        "lanes must be in 1..=16, got 0",
        id="search_prefix_depths.lanes",
    ),
    pytest.param(
        lambda p: Lane(8, np.zeros(4, np.uint64)),
        *CKF,
        "words",
        "lane words must be uint64[8]",
        id="Lane.words",
    ),
    pytest.param(
        lambda p: DcCkfPublisher(IDENT).snapshot_after_barrier(DcCkfState(OTHER), LEASE),
        *CKF,
        "state",
        f"state format {OTHER.format()} differs from the publisher's {FMT}",
        id="DcCkfPublisher.snapshot_after_barrier",
    ),
    pytest.param(
        lambda p: CuckooTable(ADDRESSING, [0, 0, 0]),
        *CKF,
        "words",
        f"expected {FMT.bucket_count} words, got array of shape (3,)",
        id="CuckooTable.words",
    ),
    pytest.param(
        lambda p: CuckooTable(ADDRESSING).insert_many([1], [0, 1], [0], SplitMix64(1), 8),
        *CKF,
        "fps",
        "fps, a and b must be 1-D and of one length",
        id="CuckooTable.insert_many",
    ),
    pytest.param(
        lambda p: SnapshotAssembly(
            FilterFormat(seed=7, bucket_count=64), into=np.zeros(10, np.uint64)
        ),
        *LANE_ARRAY,
        "into",
        "into must be a writeable, contiguous uint64[64] array",
        id="SnapshotAssembly.into",
    ),
    pytest.param(
        lambda p: ASSEMBLED.copy_into(np.zeros(3, np.uint64)),
        *LANE_ARRAY,
        "lane",
        "lane has shape (3,), snapshot has 64",
        id="AssembledSnapshot.copy_into",
    ),
    pytest.param(
        lambda p: client(workers=0),
        *CLUSTER,
        "workers",
        "workers must be >= 1",
        id="fleet.client.workers",
    ),
    pytest.param(
        lambda p: client("tcp://127.0.0.1:99999"),
        *CLUSTER,
        "scheduler",
        "'tcp://127.0.0.1:99999': port 99999 is outside 1..=65535",
        id="fleet.client.scheduler",
    ),
    pytest.param(
        lambda p: run_local("nope", p),
        errors.FleetError,
        "Query",
        "name",
        f"no fleet query 'nope' (queries: {', '.join(QUERIES)})",
        id="fleet.run_local",
    ),
]


@pytest.mark.parametrize(("call", "family", "variant", "field", "message"), BAD_ARGUMENTS)
def test_a_bad_argument_is_its_familys_variant_naming_it_in_the_same_words(
    call: Callable[[Path], object],
    family: type[errors.Cbi1kitError],
    variant: str,
    field: str | None,
    message: str,
    tmp_path: Path,
) -> None:
    """A bad argument a call once refused as a plain ``ValueError`` is its stage's family (a
    ``ValueError`` still) and variant, naming the argument as ``field``, in the same words."""
    with raises_variant(family, variant) as info:
        call(tmp_path / "c.kvrcap")
    assert isinstance(info.value, ValueError)
    assert (info.value.field, str(info.value)) == (field, message)
