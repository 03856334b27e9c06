"""The error families: variants, builtin compatibility per variant, pickling, names."""

from __future__ import annotations

import pickle

import pytest

from cbi1kit import errors
from cbi1kit.errors import CaptureError, Cbi1Error, RelayWireError, error_name


def test_front_of_the_module_lists_every_family() -> None:
    families = [getattr(errors, n) for n in errors.__all__ if n != "error_name"]
    assert all(issubclass(f, errors.Cbi1kitError) for f in families)
    assert len(families) <= 20


def test_a_dotted_variant_sets_the_subvariant() -> None:
    err = Cbi1Error("Format.Mismatch", offset=12, field="header.seed", expected=1, actual=(2, 4))
    assert (err.variant, err.subvariant, err.variant_path) == (
        "Format",
        "Mismatch",
        "Format.Mismatch",
    )
    assert str(err).startswith("format mismatch at header.seed (offset 12)")
    assert err.name == "Cbi1Error.Format"


def test_a_variant_that_is_a_builtin_error_is_one_and_stays_in_its_family() -> None:
    torn = CaptureError("Truncated", "cut", offset=8, record_index=2, source="c.kvrcap")
    corrupt = CaptureError("Corrupt", "bad magic", offset=0, record_index=0, source="c.kvrcap")
    assert isinstance(torn, CaptureError) and isinstance(torn, EOFError)
    assert isinstance(corrupt, CaptureError) and not isinstance(corrupt, EOFError)
    assert type(torn).__name__ == "CaptureError"


@pytest.mark.parametrize(
    "err",
    [
        Cbi1Error("Truncated", "short", offset=0, field="header", expected=48, actual=3),
        Cbi1Error("Format.Mismatch", field="header.seed", expected=1, actual=(2, 4)),
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
