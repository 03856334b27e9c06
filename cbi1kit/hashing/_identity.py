"""Who a CKF belongs to: one producer generation of a pool, and a consumer's lane leases.

These types and those below them (``_fields``, ``_formats``, ``_models``, ``_pools``) mirror
``lib/llm/src/kv_dc_relay/identity.rs`` and ``resolution.rs``, ``lib/kv-router/src/identity.rs``
and ``indexer/cuckoo/{global,dc}.rs``: same validation, same digests, same display strings and
the same serde JSON shapes (``to_json()`` returns the object serde_json would write;
``from_json()`` reads it back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cbi1kit.errors import IdentityError, IdentityVariant
from cbi1kit.hashing._fields import _int_in, _json_field, _json_obj, _json_uint
from cbi1kit.hashing._pools import DcId, IndexerDomainId, PoolId

_MAX_BUCKET_COUNT = 1 << 24
#: Physical lanes (DCs) a consumer table holds; a lease names one of ``0..MAX_LANES``.
MAX_LANES = 16


@dataclass(frozen=True, slots=True)
class DcCkfFormatIdentity:
    """The physical CKF layout a consumer must share with a producer to read its words.

    The constructor validates as the relay wire validator does (:meth:`check`). Upstream's
    ``DcCkfFormatIdentity::new`` and serde accept any values and ``publication/codec.rs`` gates
    them (``UnsupportedFormatIdentity``), hence :meth:`unchecked`. JSON is in upstream's order.
    """

    seed: int
    bucket_count: int
    format_version: int = 1
    fingerprint_bits: int = 16
    slots_per_bucket: int = 4

    def __post_init__(self) -> None:
        self.check()

    @classmethod
    def unchecked(
        cls,
        seed: int,
        bucket_count: int,
        format_version: int = 1,
        fingerprint_bits: int = 16,
        slots_per_bucket: int = 4,
    ) -> DcCkfFormatIdentity:
        """Any field values, as upstream's struct allows (e.g. a shape CBI1 cannot carry)."""
        self = object.__new__(cls)
        for name, value in (
            ("seed", seed),
            ("bucket_count", bucket_count),
            ("format_version", format_version),
            ("fingerprint_bits", fingerprint_bits),
            ("slots_per_bucket", slots_per_bucket),
        ):
            object.__setattr__(self, name, value)
        return self

    def check(self) -> None:
        """Raise ``IdentityError`` ``Range`` unless this is the executable CBI1 shape."""
        _int_in(self.seed, 64, "seed")
        bc = _int_in(self.bucket_count, 64, "bucket_count")
        if bc < 2 or bc > _MAX_BUCKET_COUNT or bc & (bc - 1):
            raise IdentityError(
                IdentityVariant.Range,
                f"bucket_count {bc} is not a power of two in 2..=16777216",
                field="bucket_count",
                value=bc,
            )
        for name, bits, want in (
            ("format_version", 16, 1),
            ("fingerprint_bits", 8, 16),
            ("slots_per_bucket", 8, 4),
        ):
            got = _int_in(getattr(self, name), bits, name)
            if got != want:
                raise IdentityError(
                    IdentityVariant.Range,
                    f"unsupported CKF {name} {got} (expected {want})",
                    field=name,
                    value=got,
                )

    @property
    def is_valid(self) -> bool:
        """:meth:`check` passes."""
        try:
            self.check()
        except IdentityError:
            return False
        return True

    def to_json(self) -> dict[str, Any]:
        """The format as upstream's serde JSON object."""
        return {
            "format_version": self.format_version,
            "seed": self.seed,
            "bucket_count": self.bucket_count,
            "fingerprint_bits": self.fingerprint_bits,
            "slots_per_bucket": self.slots_per_bucket,
        }

    @classmethod
    def from_json(cls, value: Any) -> DcCkfFormatIdentity:
        """A format from upstream's serde JSON; checks every field."""
        obj = _json_obj(value, "DcCkfFormatIdentity")
        t = "DcCkfFormatIdentity"
        return cls(
            seed=_json_uint(obj, "seed", 64, t),
            bucket_count=_json_uint(obj, "bucket_count", 64, t),
            format_version=_json_uint(obj, "format_version", 16, t),
            fingerprint_bits=_json_uint(obj, "fingerprint_bits", 8, t),
            slots_per_bucket=_json_uint(obj, "slots_per_bucket", 8, t),
        )


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    """One producer generation of one pool; a new incarnation or layout means a new base."""

    pool_id: PoolId
    producer_incarnation: int
    layout_generation: int
    format: DcCkfFormatIdentity

    def __post_init__(self) -> None:
        _int_in(self.producer_incarnation, 64, "producer_incarnation")
        _int_in(self.layout_generation, 64, "layout_generation")

    @property
    def indexer_domain(self) -> IndexerDomainId:
        """The pool's indexer domain (``pool_id.indexer_domain``)."""
        return self.pool_id.indexer_domain

    @property
    def dc_id(self) -> DcId:
        """The pool's DC (``pool_id.dc_id``)."""
        return self.pool_id.dc_id

    def to_json(self) -> dict[str, Any]:
        """Serde's object: ``pool_id``, the two u64 generations as JSON integers, ``format``."""
        return {
            "pool_id": self.pool_id.to_json(),
            "producer_incarnation": self.producer_incarnation,
            "layout_generation": self.layout_generation,
            "format": self.format.to_json(),
        }

    @classmethod
    def from_json(cls, value: Any) -> ProducerIdentity:
        """Read :meth:`to_json`'s object; both generations are checked as u64."""
        t = "ProducerIdentity"
        obj = _json_obj(value, t)
        return cls(
            PoolId.from_json(_json_field(obj, "pool_id", t)),
            _json_uint(obj, "producer_incarnation", 64, t),
            _json_uint(obj, "layout_generation", 64, t),
            DcCkfFormatIdentity.from_json(_json_field(obj, "format", t)),
        )


@dataclass(frozen=True, slots=True, order=True)
class ConsumerInstanceId:
    """A global-view consumer instance (u64); serde-transparent."""

    value: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _int_in(self.value, 64, "consumer_instance"))

    def __int__(self) -> int:
        return self.value

    def to_json(self) -> int:
        """The bare u64 as a JSON integer (serde-transparent)."""
        return self.value

    @classmethod
    def from_json(cls, value: Any) -> ConsumerInstanceId:
        """From a bare JSON integer (a bool is refused), checked as a u64."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise IdentityError(
                IdentityVariant.Json, f"consumer_instance must be an integer, got {value!r}"
            )
        return cls(value)


@dataclass(frozen=True, slots=True)
class LaneLease:
    """A consumer's claim on one of its 16 physical lanes, ordered by ``assignment_epoch``.

    Upstream types ``physical_lane`` as u8 and rejects lanes ``>= 16`` at assignment; a lease
    for a lane that cannot exist is refused here at construction.
    """

    consumer_instance: ConsumerInstanceId
    physical_lane: int
    assignment_epoch: int

    def __post_init__(self) -> None:
        consumer: Any = self.consumer_instance
        if not isinstance(consumer, ConsumerInstanceId):
            object.__setattr__(self, "consumer_instance", ConsumerInstanceId(consumer))
        lane = _int_in(self.physical_lane, 8, "physical_lane")
        if lane >= MAX_LANES:
            raise IdentityError(
                IdentityVariant.Range,
                f"physical_lane {lane} is outside 0..16",
                field="physical_lane",
                value=lane,
            )
        _int_in(self.assignment_epoch, 64, "assignment_epoch")

    def to_json(self) -> dict[str, Any]:
        """Serde's object of JSON integers: ``consumer_instance`` (u64), ``physical_lane`` (u8),
        ``assignment_epoch`` (u64)."""
        return {
            "consumer_instance": self.consumer_instance.to_json(),
            "physical_lane": self.physical_lane,
            "assignment_epoch": self.assignment_epoch,
        }

    @classmethod
    def from_json(cls, value: Any) -> LaneLease:
        """Read :meth:`to_json`'s object; a lane outside 0..16 is refused."""
        t = "LaneLease"
        obj = _json_obj(value, t)
        return cls(
            ConsumerInstanceId.from_json(_json_field(obj, "consumer_instance", t)),
            _json_uint(obj, "physical_lane", 8, t),
            _json_uint(obj, "assignment_epoch", 64, t),
        )


@dataclass(frozen=True, slots=True)
class ConsumerDrainMarker:
    """ "Everything up to ``expected_sequence`` has been published under ``lease``" (upstream
    ``indexer/cuckoo/global.rs``)."""

    lease: LaneLease
    expected_sequence: int

    def __post_init__(self) -> None:
        if not isinstance(self.lease, LaneLease):
            raise IdentityError(
                IdentityVariant.Json, f"lease must be a LaneLease, got {self.lease!r}"
            )
        _int_in(self.expected_sequence, 64, "expected_sequence")

    def to_json(self) -> dict[str, Any]:
        """The marker as upstream's serde JSON object."""
        return {"lease": self.lease.to_json(), "expected_sequence": self.expected_sequence}

    @classmethod
    def from_json(cls, value: Any) -> ConsumerDrainMarker:
        """A marker from upstream's serde JSON; checks every field."""
        t = "ConsumerDrainMarker"
        obj = _json_obj(value, t)
        return cls(
            LaneLease.from_json(_json_field(obj, "lease", t)),
            _json_uint(obj, "expected_sequence", 64, t),
        )


@dataclass(frozen=True, slots=True)
class RelayIdentity:
    """The relay process a stream comes from (``dynamo.kvrelay.v1.RelayIdentity``): constant
    for one subscription; a new incarnation means a restarted relay."""

    drt_instance_id: int
    relay_incarnation: int

    def __post_init__(self) -> None:
        _int_in(self.drt_instance_id, 64, "drt_instance_id")
        _int_in(self.relay_incarnation, 64, "relay_incarnation")
