"""Hash formats, model identity and resolution, pool identity digests and JSON forms."""

from __future__ import annotations

import struct
from typing import Any

import blake3
import numpy as np
import pytest
from errorcheck import raises_variant
from hypothesis import given, settings, strategies as st

from cbi1kit.errors import IdentityError
from cbi1kit.hashing._blocks import compute_block_hash_for_seq, compute_seq_hash_for_block
from cbi1kit.hashing._fields import to_i64, to_u64
from cbi1kit.hashing._formats import KvQueryHashFormat, KvQuerySemantics
from cbi1kit.hashing._identity import (
    MAX_LANES,
    ConsumerDrainMarker,
    ConsumerInstanceId,
    DcCkfFormatIdentity,
    LaneLease,
    ProducerIdentity,
    RelayIdentity,
)
from cbi1kit.hashing._models import (
    CanonicalModelId,
    CanonicalModelRegistration,
    ModelAlias,
    ModelTarget,
    resolve_lora_name,
    resolve_registration,
)
from cbi1kit.hashing._pools import (
    CacheSemanticsId,
    DcId,
    ExplicitIdentityMap,
    IdentitySource,
    IndexerDomainId,
    PoolId,
    RoutingScopeId,
    derive_cache_semantics_id,
    derive_routing_scope_id,
    stable_dc_id,
)

STD = KvQueryHashFormat.DYNAMO_STANDARD_V1
EAGLE = KvQueryHashFormat.DYNAMO_EAGLE_V1
UNICODE_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


# ---------------------------------------------------------------- formats and semantics


def test_hash_format_numbers_and_names() -> None:
    assert (STD.identity_version, EAGLE.identity_version) == (1, 2)
    assert (STD.serde_name, EAGLE.serde_name) == ("dynamo_standard_v1", "dynamo_eagle_v1")
    assert KvQueryHashFormat.from_enable_eagle(True) is EAGLE
    assert KvQueryHashFormat.from_enable_eagle(False) is STD
    assert EAGLE.is_eagle and not STD.is_eagle
    assert KvQueryHashFormat.from_serde_name("dynamo_eagle_v1") is EAGLE
    assert KvQueryHashFormat.from_identity_version(1) is STD


@pytest.mark.parametrize("bad", [0, 3, -1])
def test_unknown_or_unspecified_format_is_rejected(bad: int) -> None:
    with raises_variant(IdentityError, "UnknownHashFormat"):
        KvQueryHashFormat.from_identity_version(bad)


def test_unknown_serde_name_is_rejected() -> None:
    with raises_variant(IdentityError, "UnknownHashFormat"):
        KvQueryHashFormat.from_serde_name("DynamoEagleV1")


def test_query_semantics_json_and_validation() -> None:
    sem = KvQuerySemantics(128, EAGLE)
    assert sem.to_json() == {"kv_block_size": 128, "hash_format": "dynamo_eagle_v1"}
    assert KvQuerySemantics.from_json(sem.to_json()) == sem
    with raises_variant(IdentityError, "KvQuerySemantics", match="nonzero"):
        KvQuerySemantics(0, STD)
    with raises_variant(IdentityError, "KvQuerySemantics"):
        KvQuerySemantics.from_json({"kv_block_size": 0, "hash_format": "dynamo_standard_v1"})
    with raises_variant(IdentityError, "UnknownHashFormat"):
        KvQuerySemantics.from_json({"kv_block_size": 4, "hash_format": "unspecified"})
    with raises_variant(IdentityError, "KvQuerySemantics"):
        KvQuerySemantics(2**32, STD)


# ---------------------------------------------------------------- model identity


@pytest.mark.parametrize("cls", [CanonicalModelId, ModelAlias])
def test_identity_text_rejects_empty_and_every_unicode_white_space_edge(cls: Any) -> None:
    error = "CanonicalModelId" if cls is CanonicalModelId else "ModelAlias"
    with raises_variant(IdentityError, error) as err:
        cls("")
    assert err.value.reason == "empty"
    for ws in UNICODE_WHITE_SPACE:
        for text in (ws + "llama", "llama" + ws, ws):
            with raises_variant(IdentityError, error) as err:
                cls(text)
            assert err.value.reason == "surrounding_whitespace"
            assert err.value.value == text
        assert cls("lla" + ws + "ma").value == "lla" + ws + "ma"  # internal is allowed
    # Python's str.strip also strips \x1c-\x1f; Rust's trim does not, so these are valid.
    for c in "\x1c\x1d\x1e\x1f\u200b":
        assert cls(c + "m" + c).value == c + "m" + c


def test_registration_normalises_aliases_like_upstream() -> None:
    reg = CanonicalModelRegistration.new(
        CanonicalModelId("llama"), [ModelAlias("chat"), ModelAlias("llama"), ModelAlias("chat")]
    )
    assert reg.aliases == (ModelAlias("chat"),)
    assert reg.target == ModelTarget.base("llama")
    reg2 = CanonicalModelRegistration.new("m", ["z", "b", "ä", "a"])
    assert [a.value for a in reg2.aliases] == ["a", "b", "z", "ä"]  # byte order


def test_model_target_and_registration_json() -> None:
    assert ModelTarget.base("m").to_json() == {"Base": {"base_model": "m"}}
    lora = ModelTarget.lora("m", "a")
    assert lora.to_json() == {"Lora": {"base_model": "m", "adapter": "a"}}
    assert (lora.kind, lora.lora_name) == ("Lora", "a")
    assert ModelTarget.from_json(lora.to_json()) == lora
    reg = CanonicalModelRegistration.with_target("a", lora, ["x"])
    assert reg.to_json() == {"model": "a", "target": lora.to_json(), "aliases": ["x"]}
    assert CanonicalModelRegistration.from_json(reg.to_json()) == reg
    with pytest.raises(ValueError, match="variant"):
        ModelTarget.from_json({"Adapter": {"base_model": "m"}})
    with raises_variant(IdentityError, "CanonicalModelId"):
        ModelTarget.from_json({"Base": {"base_model": " m"}})


def test_resolution_by_model_or_alias() -> None:
    base = CanonicalModelRegistration.new("llama", ["chat"])
    lora = CanonicalModelRegistration.with_target(
        "tenant-a", ModelTarget.lora("llama", "tenant-a"), ["tenant-chat"]
    )
    regs = [base, lora]
    assert resolve_registration(regs, "chat") is base
    assert resolve_registration(regs, "tenant-a") is lora
    assert resolve_lora_name(regs, "tenant-chat") == "tenant-a"
    assert resolve_lora_name(regs, "llama") is None
    with raises_variant(IdentityError, "UnknownModel") as err:
        resolve_registration(regs, "Llama")
    assert err.value.requested_model == "Llama"
    assert isinstance(err.value, LookupError)


@pytest.mark.parametrize("hash_format", [STD, EAGLE])
def test_seed_scenario_lora_alias_hashes_with_canonical_adapter(
    hash_format: KvQueryHashFormat,
) -> None:
    """Upstream's CBI1 round-trip test: a LoRA registration reached through its alias."""
    semantics = KvQuerySemantics(4, hash_format)
    registration = CanonicalModelRegistration.with_target(
        CanonicalModelId("tenant-a"),
        ModelTarget.lora(CanonicalModelId("llama"), CanonicalModelId("tenant-a")),
        [ModelAlias("tenant-chat")],
    )
    lora = resolve_registration([registration], "tenant-chat").target.lora_name
    assert lora == "tenant-a"
    opts: dict[str, Any] = {"lora_name": lora, "cache_namespace": "tenant-ns"}
    initial = semantics.block_hashes(list(range(13)), **opts)
    expanded = semantics.block_hashes(list(range(21)), **opts)
    assert len(expanded) > len(initial) > 0
    assert expanded[: len(initial)].tolist() == initial.tolist()
    direct = compute_block_hash_for_seq(
        list(range(21)),
        4,
        lora_name="tenant-a",
        is_eagle=hash_format.is_eagle,
        cache_namespace="tenant-ns",
    )
    assert expanded.tolist() == direct.tolist()
    by_alias = compute_block_hash_for_seq(
        list(range(21)),
        4,
        lora_name="tenant-chat",
        is_eagle=hash_format.is_eagle,
        cache_namespace="tenant-ns",
    )
    assert not set(by_alias.tolist()) & set(expanded.tolist())
    seq = semantics.sequence_hashes(list(range(21)), **opts)
    assert seq.tolist() == compute_seq_hash_for_block(direct).tolist()
    seq_initial = semantics.sequence_hashes(list(range(13)), **opts)
    assert seq[: len(seq_initial)].tolist() == seq_initial.tolist()


# ---------------------------------------------------------------- pool identity


def test_golden_relay_identity_digests() -> None:
    cs = derive_cache_semantics_id(["meta/llama"], 512, STD)
    assert str(cs) == "7d31eb9019357572470605f4a8be687e"
    assert cs.source is IdentitySource.DEFAULT_DERIVED
    assert str(derive_cache_semantics_id(["meta/llama"], 512, EAGLE)) == (
        "deae03cf69f6e4a47cbec26ceba95354"
    )
    rs = derive_routing_scope_id(["prod", "router", "generate"])
    assert str(rs) == "18270d3ba03effaec8d167ba02c7752d"


def test_explicit_material_replaces_defaults_and_ignores_order() -> None:
    first = ExplicitIdentityMap.of({"weights": "revision-a", "mapping": "tp2"})
    second = ExplicitIdentityMap.from_json_text('{"mapping":"tp2","weights":"revision-a"}')
    a = derive_cache_semantics_id(["default-a"], 512, 1, first)
    b = derive_cache_semantics_id(["default-b"], 512, 1, second)
    assert a == b
    assert a.source is IdentitySource.EXPLICIT
    assert derive_cache_semantics_id(["x"], 1024, 1, first) != a  # block size stays mandatory
    assert derive_cache_semantics_id(["x"], 512, 2, first) != a  # and so does the format


def test_default_and_explicit_never_alias_and_framing_separates() -> None:
    explicit = ExplicitIdentityMap.of({"model": "same"})
    assert derive_cache_semantics_id(["same"], 512, 1) != derive_cache_semantics_id(
        ["ignored"], 512, 1, explicit
    )
    assert derive_routing_scope_id(["ab", "c"]) != derive_routing_scope_id(["a", "bc"])
    assert derive_routing_scope_id(["a"], explicit).source is IdentitySource.EXPLICIT


@pytest.mark.parametrize(
    ("entries", "variant"),
    [
        ({}, "Empty"),
        ({f"k{i}": "v" for i in range(33)}, "TooManyEntries"),
        ({"": "v"}, "EmptyKey"),
        ({"k" * 129: "v"}, "KeyTooLong"),
        ({"ä" * 65: "v"}, "KeyTooLong"),  # 130 UTF-8 bytes
        ({"k": ""}, "EmptyValue"),
        ({"k": "v" * 1025}, "ValueTooLong"),
    ],
)
def test_explicit_map_limits(entries: dict[str, str], variant: str) -> None:
    with raises_variant(IdentityError, "IdentitySpec") as err:
        ExplicitIdentityMap.of(entries)
    assert err.value.subvariant == variant


def test_explicit_map_limits_are_inclusive() -> None:
    ExplicitIdentityMap.of({f"k{i}": "v" for i in range(32)})
    ExplicitIdentityMap.of({"k" * 128: "v" * 1024})


def test_explicit_map_rejects_duplicate_json_keys() -> None:
    with raises_variant(IdentityError, "IdentitySpec", match="duplicate explicit identity key"):
        ExplicitIdentityMap.from_json_text('{"weights":"a","weights":"b"}')


def test_stable_dc_id_framing() -> None:
    name = "dc-a"
    digest = blake3.blake3(b"dynamo/indexer-dc/v1" + struct.pack("<I", 4) + b"dc-a").digest()
    assert stable_dc_id(name) == DcId(int.from_bytes(digest[:8], "little"))
    assert stable_dc_id("dc-a") != stable_dc_id("dc-b")
    assert stable_dc_id("é").value != stable_dc_id("e").value


def test_display_forms_and_parsing() -> None:
    cs = CacheSemanticsId(bytes([0xAB] * 16), IdentitySource.EXPLICIT)
    rs = RoutingScopeId(bytes([0x01] * 16), IdentitySource.DEFAULT_DERIVED)
    assert str(cs) == "ab" * 16
    assert str(rs) == "01" * 16
    assert str(DcId(1)) == "0000000000000001"
    pool = PoolId(IndexerDomainId(cs, rs), DcId(0x1234))
    assert str(pool) == f"{'ab' * 16}:{'01' * 16}/0000000000001234"
    parsed = PoolId.parse(str(pool))
    # Upstream FromStr marks parsed digests Explicit; the digests and DC survive.
    assert str(parsed) == str(pool)
    assert parsed.indexer_domain.routing_scope.source is IdentitySource.EXPLICIT
    assert DcId.parse("00000000000000ff") == DcId(255)
    for bad in ["AB" * 16, "ab" * 15, "zz" * 16]:
        with raises_variant(IdentityError, "Parse"):
            CacheSemanticsId.parse(bad)
    for bad in ["a:b:c", "nocolon"]:
        with raises_variant(IdentityError, "Parse"):
            IndexerDomainId.parse(bad)
    with raises_variant(IdentityError, "Parse"):
        PoolId.parse(f"{'ab' * 16}:{'01' * 16}/0/1")


def _producer() -> ProducerIdentity:
    domain = IndexerDomainId(
        CacheSemanticsId(bytes([1] * 16), IdentitySource.EXPLICIT),
        RoutingScopeId(bytes([2] * 16), IdentitySource.DEFAULT_DERIVED),
    )
    return ProducerIdentity(
        PoolId(domain, DcId(3)), 11, 1, DcCkfFormatIdentity(seed=2**64 - 1, bucket_count=524288)
    )


def test_json_forms_match_serde() -> None:
    producer = _producer()
    assert producer.to_json() == {
        "pool_id": {
            "indexer_domain": {
                "cache_semantics": {"digest": [1] * 16, "source": "explicit"},
                "routing_scope": {"digest": [2] * 16, "source": "default_derived"},
            },
            "dc_id": 3,
        },
        "producer_incarnation": 11,
        "layout_generation": 1,
        "format": {
            "format_version": 1,
            "seed": 2**64 - 1,
            "bucket_count": 524288,
            "fingerprint_bits": 16,
            "slots_per_bucket": 4,
        },
    }
    assert ProducerIdentity.from_json(producer.to_json()) == producer
    assert producer.dc_id == DcId(3)
    assert producer.indexer_domain.relies_on_defaults
    lease = LaneLease(ConsumerInstanceId(13), 0, 1)
    assert lease.to_json() == {"consumer_instance": 13, "physical_lane": 0, "assignment_epoch": 1}
    assert LaneLease.from_json(lease.to_json()) == lease


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bucket_count": 3},
        {"bucket_count": 1},
        {"bucket_count": 2**25},
        {"format_version": 2},
        {"fingerprint_bits": 8},
        {"slots_per_bucket": 2},
        {"seed": -1},
        {"seed": 2**64},
    ],
)
def test_format_identity_validation(kwargs: dict[str, int]) -> None:
    args = {"seed": 0, "bucket_count": 2, **kwargs}
    with raises_variant(IdentityError, "Range"):
        DcCkfFormatIdentity(**args)


def test_format_and_lease_bounds_are_inclusive() -> None:
    DcCkfFormatIdentity(seed=0, bucket_count=2**24)
    LaneLease(ConsumerInstanceId(0), 15, 2**64 - 1)
    with raises_variant(IdentityError, "Range"):
        LaneLease(ConsumerInstanceId(0), 16, 0)
    with raises_variant(IdentityError, "Range"):
        ConsumerInstanceId(-1)


def test_json_rejects_wrong_shapes() -> None:
    good = _producer().to_json()
    bad_digest = dict(good)
    bad_digest["pool_id"] = {"indexer_domain": good["pool_id"]["indexer_domain"], "dc_id": True}
    with pytest.raises(ValueError):
        ProducerIdentity.from_json(bad_digest)
    with pytest.raises(ValueError, match="layout_generation"):
        ProducerIdentity.from_json({k: v for k, v in good.items() if k != "layout_generation"})


# ---------------------------------------------------------------- signed / unsigned


def test_signed_unsigned_example_and_bounds() -> None:
    assert to_i64(15883719750896736839) == -2563024322812814777
    assert to_u64(-2563024322812814777) == 15883719750896736839
    assert (to_i64(2**63 - 1), to_i64(2**63), to_u64(-1)) == (2**63 - 1, -(2**63), 2**64 - 1)
    with raises_variant(IdentityError, "Range"):
        to_u64(2**64)
    with raises_variant(IdentityError, "Range"):
        to_i64(-1)
    arr = np.array([0, 2**63, 2**64 - 1], dtype=np.uint64)
    assert to_i64(arr).tolist() == [0, -(2**63), -1]
    assert to_u64(to_i64(arr)).tolist() == arr.tolist()


@settings(max_examples=300)
@given(st.integers(0, 2**64 - 1))
def test_signed_unsigned_round_trip(u: int) -> None:
    i = to_i64(u)
    assert -(2**63) <= i < 2**63
    assert to_u64(i) == u
    assert struct.pack("<q", i) == struct.pack("<Q", u)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"format_version": 2},
        {"fingerprint_bits": 8},
        {"slots_per_bucket": 8},
        {"bucket_count": 3},
        {"seed": 2**64},
    ],
)
def test_unchecked_format_holds_any_shape_and_check_refuses_it(kwargs: dict[str, int]) -> None:
    args = {"seed": 7, "bucket_count": 1024, **kwargs}
    fmt = DcCkfFormatIdentity.unchecked(**args)
    assert {k: getattr(fmt, k) for k in args} == args
    assert not fmt.is_valid
    with raises_variant(IdentityError, "Range") as info:
        fmt.check()
    assert info.value.field == next(iter(kwargs))
    good = DcCkfFormatIdentity.unchecked(7, 1024)
    assert good == DcCkfFormatIdentity(7, 1024) and good.is_valid
    assert fmt != good


def test_drain_marker_and_relay_identity() -> None:
    lease = LaneLease(ConsumerInstanceId(13), 2, 5)
    marker = ConsumerDrainMarker(lease, 2**64 - 1)
    assert ConsumerDrainMarker.from_json(marker.to_json()) == marker
    assert marker.to_json()["expected_sequence"] == 2**64 - 1
    with raises_variant(IdentityError, "Range"):
        ConsumerDrainMarker(lease, 2**64)
    assert RelayIdentity(2**64 - 1, 0).drt_instance_id == 2**64 - 1
    with raises_variant(IdentityError, "Range"):
        RelayIdentity(-1, 0)
    assert MAX_LANES == 16
