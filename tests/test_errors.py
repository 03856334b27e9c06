"""The error families: variants, builtin compatibility per variant, pickling, names."""

from __future__ import annotations

import pickle
from enum import StrEnum

import pytest

from cbi1kit import errors
from cbi1kit.errors import (
    CaptureError,
    Cbi1Error,
    Cbi1Variant,
    DatasetVariant,
    RelayWireError,
    error_name,
)

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
