"""Who a CKF belongs to: hash formats, model identity, and pool identity, as upstream has them.

A filter answers only for sequence hashes computed under one exact contract (block size, EAGLE
or standard windows, LoRA adapter, cache namespace), and only for one pool (cache semantics,
routing scope, DC). These types mirror ``lib/llm/src/kv_dc_relay/identity.rs`` and
``resolution.rs``, ``lib/kv-router/src/identity.rs`` and ``indexer/cuckoo/{global,dc}.rs``:
same validation, same digests, same display strings and the same serde JSON shapes
(``to_json()`` returns the object serde_json would write; ``from_json()`` reads it back).
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, overload

import blake3
import numpy as np
import numpy.typing as npt

from cbi1kit.errors import IdentityError, IdentityVariant
from cbi1kit.hashing._blocks import compute_block_hash_for_seq, compute_seq_hash_for_block

__all__ = [
    "MAX_EXPLICIT_IDENTITY_ENTRIES",
    "MAX_EXPLICIT_IDENTITY_KEY_BYTES",
    "MAX_EXPLICIT_IDENTITY_VALUE_BYTES",
    "MAX_LANES",
    "CacheSemanticsId",
    "CanonicalIdentityMaterial",
    "CanonicalModelId",
    "CanonicalModelRegistration",
    "ConsumerDrainMarker",
    "ConsumerInstanceId",
    "DcCkfFormatIdentity",
    "DcId",
    "ExplicitIdentityMap",
    "IdentitySource",
    "IndexerDomainId",
    "KvQueryHashFormat",
    "KvQuerySemantics",
    "LaneLease",
    "ModelAlias",
    "ModelTarget",
    "PoolId",
    "ProducerIdentity",
    "RelayIdentity",
    "RoutingScopeId",
    "derive_cache_semantics_id",
    "derive_routing_scope_id",
    "resolve_lora_name",
    "resolve_registration",
    "stable_dc_id",
    "to_i64",
    "to_u64",
]

MAX_EXPLICIT_IDENTITY_ENTRIES = 32
MAX_EXPLICIT_IDENTITY_KEY_BYTES = 128
MAX_EXPLICIT_IDENTITY_VALUE_BYTES = 1024

_CACHE_SEMANTICS_DEFAULT_V1 = b"dynamo/indexer-cache-semantics/default/v1"
_CACHE_SEMANTICS_EXPLICIT_V1 = b"dynamo/indexer-cache-semantics/explicit/v1"
_ROUTING_SCOPE_DEFAULT_V1 = b"dynamo/indexer-routing-scope/default/v1"
_ROUTING_SCOPE_EXPLICIT_V1 = b"dynamo/indexer-routing-scope/explicit/v1"
_DC_ID_DOMAIN = b"dynamo/indexer-dc/v1"

_U64_MASK = (1 << 64) - 1
_MAX_BUCKET_COUNT = 1 << 24
#: Physical lanes (DCs) a consumer table holds; a lease names one of ``0..MAX_LANES``.
MAX_LANES = 16

# Rust `str::trim` strips Unicode White_Space; Python's `str.strip` also strips \x1c-\x1f.
_WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


# --------------------------------------------------------------------------------------------
# Errors


def _text_error(variant: IdentityVariant, kind: str, value: str, reason: str) -> IdentityError:
    """Upstream ``CanonicalModelIdError`` / ``ModelAliasError``: ``reason`` is ``empty`` or
    ``surrounding_whitespace``."""
    what = (
        "must not be empty"
        if reason == "empty"
        else "must not contain leading or trailing whitespace"
    )
    return IdentityError(
        variant, f"{kind} {what}: {value!r}", field=kind, value=value, reason=reason
    )


def _spec_error(variant: str, message: str, *, key: str | None = None) -> IdentityError:
    """Upstream ``IdentitySpecError``: an explicit identity map outside its limits (``Empty``,
    ``TooManyEntries``, ``EmptyKey``, ``EmptyValue``, ``KeyTooLong``, ``ValueTooLong``, or
    ``DuplicateKey`` for the serde check)."""
    return IdentityError(
        IdentityVariant.IdentitySpec,
        message,
        subvariant=variant,
        field="explicit identity map",
        value=key,
        key=key,
    )


# --------------------------------------------------------------------------------------------
# Small checks


def _int_in(value: Any, bits: int, field: str, *, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise IdentityError(
            IdentityVariant.Range,
            f"{field} must be an integer, got {type(value).__name__} {value!r}",
            field=field,
            value=value,
        )
    n = int(value)
    if not low <= n < (1 << bits):
        raise IdentityError(
            IdentityVariant.Range,
            f"{field} = {n} is outside {low}..={(1 << bits) - 1} (u{bits})",
            field=field,
            value=n,
        )
    return n


def _json_obj(value: Any, type_name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise IdentityError(
            IdentityVariant.Json,
            f"{type_name} JSON must be an object, got {type(value).__name__}",
            field=type_name,
            value=value,
        )
    return value


def _json_field(obj: Mapping[str, Any], key: str, type_name: str) -> Any:
    if key not in obj:
        raise IdentityError(
            IdentityVariant.Json, f"{type_name}: missing field `{key}`", field=key, value=obj
        )
    return obj[key]


def _json_uint(obj: Mapping[str, Any], key: str, bits: int, type_name: str) -> int:
    value = _json_field(obj, key, type_name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise IdentityError(
            IdentityVariant.Json,
            f"{type_name}.{key} must be an integer, got {value!r}",
            field=key,
            value=value,
        )
    return _int_in(value, bits, f"{type_name}.{key}")


def _json_str(value: Any, field_name: str) -> str:
    if not isinstance(value, str):
        raise IdentityError(
            IdentityVariant.Json,
            f"{field_name} must be a string, got {value!r}",
            field=field_name,
            value=value,
        )
    return value


@overload
def to_u64(value: int) -> int: ...
@overload
def to_u64(value: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]: ...
def to_u64(value: int | npt.NDArray[np.int64]) -> int | npt.NDArray[np.uint64]:
    """Reinterpret a signed i64 as the u64 it carries (``i & (2**64-1)``), as Rust's ``as u64``.

    Publishers document ``block_hashes`` / ``parent_hash`` as i64; the router works in u64.
    """
    if isinstance(value, np.ndarray):
        return value.astype(np.int64, copy=False).view(np.uint64)
    n = int(value)
    if not -(1 << 63) <= n <= _U64_MASK:
        raise IdentityError(
            IdentityVariant.Range, f"{n} is neither an i64 nor a u64", field="value", value=n
        )
    return n & _U64_MASK


@overload
def to_i64(value: int) -> int: ...
@overload
def to_i64(value: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]: ...
def to_i64(value: int | npt.NDArray[np.uint64]) -> int | npt.NDArray[np.int64]:
    """The i64 with the same bits as a u64 hash (``u - 2**64`` when ``u >= 2**63``)."""
    if isinstance(value, np.ndarray):
        return value.astype(np.uint64, copy=False).view(np.int64)
    n = _int_in(value, 64, "value")
    return n - (1 << 64) if n >= 1 << 63 else n


# --------------------------------------------------------------------------------------------
# Hash format and query semantics


class KvQueryHashFormat(enum.IntEnum):
    """One atomic token→sequence-hash contract: windowing, MM bytes, salts, local and rolling hash.

    The value is both the proto enum number and ``identity_version`` (mixed into the
    cache-semantics digest). 0 (``UNSPECIFIED``) and anything else are not formats.
    """

    DYNAMO_STANDARD_V1 = 1
    DYNAMO_EAGLE_V1 = 2

    @property
    def identity_version(self) -> int:
        """The u16 upstream mixes into ``CacheSemanticsId`` (standard 1, EAGLE 2)."""
        return int(self.value)

    @property
    def serde_name(self) -> str:
        """The snake_case name upstream's serde writes."""
        return self.name.lower()

    @property
    def is_eagle(self) -> bool:
        """Whether block hashes use EAGLE windows (``DYNAMO_EAGLE_V1``)."""
        return self is KvQueryHashFormat.DYNAMO_EAGLE_V1

    @classmethod
    def from_enable_eagle(cls, enable_eagle: bool) -> KvQueryHashFormat:
        """From upstream's ``enable_eagle`` flag: EAGLE when set, standard otherwise."""
        return cls.DYNAMO_EAGLE_V1 if enable_eagle else cls.DYNAMO_STANDARD_V1

    @classmethod
    def from_identity_version(cls, version: int) -> KvQueryHashFormat:
        """From the proto number / identity version; 0 and unknown values are refused."""
        try:
            return cls(version)
        except ValueError:
            raise IdentityError(
                IdentityVariant.UnknownHashFormat,
                f"unknown or unspecified KV query hash format {version!r}",
                field="hash_format",
                value=version,
            ) from None

    @classmethod
    def from_serde_name(cls, name: str) -> KvQueryHashFormat:
        """From the snake_case serde name (``dynamo_standard_v1``, ``dynamo_eagle_v1``)."""
        for member in cls:
            if member.serde_name == name:
                return member
        raise IdentityError(
            IdentityVariant.UnknownHashFormat,
            f"unknown KV query hash format {name!r}",
            field="hash_format",
            value=name,
        )

    def to_json(self) -> str:
        """The serde name as a JSON string, e.g. ``dynamo_standard_v1``."""
        return self.serde_name

    @classmethod
    def from_json(cls, value: Any) -> KvQueryHashFormat:
        """From the serde name JSON string; unknown names are refused."""
        return cls.from_serde_name(_json_str(value, "hash_format"))


@dataclass(frozen=True, slots=True)
class KvQuerySemantics:
    """What a consumer needs to recompute a pool's sequence hashes: block size and format."""

    kv_block_size: int
    hash_format: KvQueryHashFormat

    def __post_init__(self) -> None:
        if isinstance(self.kv_block_size, bool) or not isinstance(self.kv_block_size, int):
            raise IdentityError(
                IdentityVariant.KvQuerySemantics,
                f"kv_block_size must be an integer, got {self.kv_block_size!r}",
                field="kv_block_size",
                value=self.kv_block_size,
            )
        if self.kv_block_size == 0:
            raise IdentityError(
                IdentityVariant.KvQuerySemantics,
                "KV query block size must be nonzero",
                field="kv_block_size",
                value=0,
            )
        if not 0 < self.kv_block_size < 1 << 32:
            raise IdentityError(
                IdentityVariant.KvQuerySemantics,
                f"kv_block_size {self.kv_block_size} is outside 1..=4294967295 (u32)",
                field="kv_block_size",
                value=self.kv_block_size,
            )
        fmt: Any = self.hash_format
        if not isinstance(fmt, KvQueryHashFormat):
            object.__setattr__(self, "hash_format", KvQueryHashFormat.from_identity_version(fmt))

    def block_hashes(
        self,
        tokens: npt.ArrayLike | Sequence[int],
        *,
        lora_name: str | None = None,
        cache_namespace: str | None = None,
        block_mm_infos: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> npt.NDArray[np.uint64]:
        """Local block hashes of ``tokens`` under this contract."""
        return compute_block_hash_for_seq(
            tokens,
            self.kv_block_size,
            block_mm_infos=block_mm_infos,
            lora_name=lora_name,
            is_eagle=self.hash_format.is_eagle,
            cache_namespace=cache_namespace,
        )

    def sequence_hashes(
        self,
        tokens: npt.ArrayLike | Sequence[int],
        *,
        lora_name: str | None = None,
        cache_namespace: str | None = None,
        block_mm_infos: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> npt.NDArray[np.uint64]:
        """The sequence hashes a pool's CKF stores for ``tokens`` under this contract."""
        return compute_seq_hash_for_block(
            self.block_hashes(
                tokens,
                lora_name=lora_name,
                cache_namespace=cache_namespace,
                block_mm_infos=block_mm_infos,
            )
        )

    def to_json(self) -> dict[str, Any]:
        """Serde's object: ``kv_block_size`` (u32) and ``hash_format`` (its serde name)."""
        return {"kv_block_size": self.kv_block_size, "hash_format": self.hash_format.to_json()}

    @classmethod
    def from_json(cls, value: Any) -> KvQuerySemantics:
        """Read :meth:`to_json`'s object; ``kv_block_size`` is checked as a u32."""
        obj = _json_obj(value, "KvQuerySemantics")
        bs = _json_uint(obj, "kv_block_size", 32, "KvQuerySemantics")
        fmt = KvQueryHashFormat.from_json(_json_field(obj, "hash_format", "KvQuerySemantics"))
        return cls(bs, fmt)


# --------------------------------------------------------------------------------------------
# Model identity


def _surrounded_by_white_space(value: str) -> bool:
    return value[0] in _WHITE_SPACE or value[-1] in _WHITE_SPACE


@dataclass(frozen=True, slots=True, order=True)
class _ModelName:
    """A validated model name: non-empty, no Unicode White_Space at either end (Rust ``trim``).

    Ordered as Rust orders ``String`` (code point order equals UTF-8 byte order). Subclasses
    differ only in the upstream error type they raise.
    """

    value: str
    _variant: ClassVar[IdentityVariant]  # upstream's error type
    _kind: ClassVar[str]  # how messages name the value

    def __post_init__(self) -> None:
        if not isinstance(self.value, str):
            raise IdentityError(
                IdentityVariant.Json,
                f"{self._kind} must be a str, got {self.value!r}",
                value=self.value,
            )
        if not self.value:
            raise _text_error(self._variant, self._kind, self.value, "empty")
        if _surrounded_by_white_space(self.value):
            raise _text_error(self._variant, self._kind, self.value, "surrounding_whitespace")

    def __str__(self) -> str:
        return self.value

    def to_json(self) -> str:
        return self.value

    @classmethod
    def from_json(cls, value: Any) -> Self:
        return cls(_json_str(value, cls._kind))


@dataclass(frozen=True, slots=True, order=True)
class CanonicalModelId(_ModelName):
    """A model's canonical name (upstream ``CanonicalModelId``)."""

    _variant = IdentityVariant.CanonicalModelId
    _kind = "canonical model ID"


@dataclass(frozen=True, slots=True, order=True)
class ModelAlias(_ModelName):
    """Another name a request may use for a registration; validated like a canonical ID."""

    _variant = IdentityVariant.ModelAlias
    _kind = "model alias"


def _model_id(value: CanonicalModelId | str) -> CanonicalModelId:
    return value if isinstance(value, CanonicalModelId) else CanonicalModelId(value)


@dataclass(frozen=True, slots=True)
class ModelTarget:
    """What a registration serves: a base model, or a LoRA ``adapter`` on ``base_model``.

    Upstream is an enum ``Base{base_model} | Lora{base_model, adapter}``; here ``adapter`` is
    ``None`` for ``Base``. The adapter's canonical name is what salts LoRA block hashes.
    """

    base_model: CanonicalModelId
    adapter: CanonicalModelId | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_model", _model_id(self.base_model))
        if self.adapter is not None:
            object.__setattr__(self, "adapter", _model_id(self.adapter))

    @classmethod
    def base(cls, base_model: CanonicalModelId | str) -> ModelTarget:
        """A ``Base`` target: ``base_model`` itself."""
        return cls(_model_id(base_model))

    @classmethod
    def lora(
        cls, base_model: CanonicalModelId | str, adapter: CanonicalModelId | str
    ) -> ModelTarget:
        """A ``Lora`` target: ``adapter`` on ``base_model``."""
        return cls(_model_id(base_model), _model_id(adapter))

    @property
    def kind(self) -> str:
        """The upstream variant name, ``Base`` or ``Lora``."""
        return "Base" if self.adapter is None else "Lora"

    @property
    def lora_name(self) -> str | None:
        """The string that salts this target's block hashes, or None for a base model."""
        return None if self.adapter is None else self.adapter.value

    def to_json(self) -> dict[str, Any]:
        """Serde's externally tagged enum: ``{"Base": {...}}`` or ``{"Lora": {...}}``."""
        if self.adapter is None:
            return {"Base": {"base_model": self.base_model.value}}
        return {"Lora": {"base_model": self.base_model.value, "adapter": self.adapter.value}}

    @classmethod
    def from_json(cls, value: Any) -> ModelTarget:
        """Read the tagged object: exactly one key, ``Base`` or ``Lora``."""
        obj = _json_obj(value, "ModelTarget")
        if len(obj) != 1:
            raise IdentityError(
                IdentityVariant.Json,
                "ModelTarget JSON must have exactly one variant key",
                field="ModelTarget",
                value=obj,
            )
        ((variant, body),) = obj.items()
        inner = _json_obj(body, f"ModelTarget.{variant}")
        base = CanonicalModelId.from_json(_json_field(inner, "base_model", variant))
        if variant == "Base":
            return cls(base)
        if variant == "Lora":
            return cls(base, CanonicalModelId.from_json(_json_field(inner, "adapter", variant)))
        raise IdentityError(
            IdentityVariant.Json,
            f"unknown ModelTarget variant {variant!r} (expected Base or Lora)",
            field="ModelTarget",
            value=variant,
        )


@dataclass(frozen=True, slots=True)
class CanonicalModelRegistration:
    """A model a pool serves, what it targets, and the aliases requests may use for it.

    Aliases are normalised as upstream's ``with_target``: an alias equal to the model is
    dropped, the rest are sorted and deduplicated, so equal registrations compare equal.
    """

    model: CanonicalModelId
    target: ModelTarget
    aliases: tuple[ModelAlias, ...] = ()

    def __post_init__(self) -> None:
        model = _model_id(self.model)
        aliases = {a if isinstance(a, ModelAlias) else ModelAlias(a) for a in self.aliases}
        object.__setattr__(self, "model", model)
        object.__setattr__(
            self, "aliases", tuple(sorted(a for a in aliases if a.value != model.value))
        )

    @classmethod
    def new(
        cls, model: CanonicalModelId | str, aliases: Iterable[ModelAlias | str] = ()
    ) -> CanonicalModelRegistration:
        """A base-model registration (``target = Base{base_model: model}``)."""
        model_id = _model_id(model)
        return cls(model_id, ModelTarget.base(model_id), tuple(_alias(a) for a in aliases))

    @classmethod
    def with_target(
        cls,
        model: CanonicalModelId | str,
        target: ModelTarget,
        aliases: Iterable[ModelAlias | str] = (),
    ) -> CanonicalModelRegistration:
        """A registration serving ``target`` (e.g. a LoRA adapter): upstream's ``with_target``."""
        return cls(_model_id(model), target, tuple(_alias(a) for a in aliases))

    @property
    def lora_name(self) -> str | None:
        """The canonical adapter name that salts this registration's hashes (None for base)."""
        return self.target.lora_name

    def matches(self, requested_model: str) -> bool:
        """Whether a request naming ``requested_model`` is served by this registration."""
        return self.model.value == requested_model or any(
            a.value == requested_model for a in self.aliases
        )

    def to_json(self) -> dict[str, Any]:
        """Serde's object: ``model``, ``target`` (tagged, see :class:`ModelTarget`), ``aliases``."""
        return {
            "model": self.model.to_json(),
            "target": self.target.to_json(),
            "aliases": [a.to_json() for a in self.aliases],
        }

    @classmethod
    def from_json(cls, value: Any) -> CanonicalModelRegistration:
        """Read :meth:`to_json`'s object; the aliases are normalised again."""
        obj = _json_obj(value, "CanonicalModelRegistration")
        aliases = _json_field(obj, "aliases", "CanonicalModelRegistration")
        if not isinstance(aliases, list):
            raise IdentityError(
                IdentityVariant.Json, "aliases must be a list", field="aliases", value=aliases
            )
        return cls.with_target(
            CanonicalModelId.from_json(_json_field(obj, "model", "CanonicalModelRegistration")),
            ModelTarget.from_json(_json_field(obj, "target", "CanonicalModelRegistration")),
            [ModelAlias.from_json(a) for a in aliases],
        )


def _alias(value: ModelAlias | str) -> ModelAlias:
    return value if isinstance(value, ModelAlias) else ModelAlias(value)


def resolve_registration(
    registrations: Iterable[CanonicalModelRegistration], requested_model: str
) -> CanonicalModelRegistration:
    """The first registration whose model or one of whose aliases is ``requested_model``.

    Mirrors upstream's query path (the first match in advertised order wins).
    """
    regs = list(registrations)
    for registration in regs:
        if registration.matches(requested_model):
            return registration
    known = [r.model.value for r in regs]
    raise IdentityError(
        IdentityVariant.UnknownModel,
        f"model {requested_model!r} matches no registration (known: {', '.join(known) or '-'})",
        field="requested_model",
        value=requested_model,
        requested_model=requested_model,
        known=tuple(known),
    )


def resolve_lora_name(
    registrations: Iterable[CanonicalModelRegistration], requested_model: str
) -> str | None:
    """The adapter name that salts a request's block hashes: the *canonical* adapter, even when
    the request names an alias; None when the resolved target is a base model."""
    return resolve_registration(registrations, requested_model).lora_name


# --------------------------------------------------------------------------------------------
# Pool identity


@functools.total_ordering
class IdentitySource(enum.Enum):
    """Whether a digest came from defaults (source path, endpoint) or an explicit map.

    Ordered as upstream's derived ``Ord`` (``DefaultDerived < Explicit``) so ids sort alike.
    """

    DEFAULT_DERIVED = "default_derived"
    EXPLICIT = "explicit"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, IdentitySource):
            return NotImplemented
        return self.proto_value < other.proto_value

    @property
    def proto_value(self) -> int:
        """``dynamo.kvrelay.v1.IdentitySource`` number (0 is UNSPECIFIED, never produced)."""
        return 1 if self is IdentitySource.DEFAULT_DERIVED else 2

    @classmethod
    def from_proto(cls, value: int) -> IdentitySource:
        """From the proto number; 0 (UNSPECIFIED) and unknown numbers are refused."""
        if value == 1:
            return cls.DEFAULT_DERIVED
        if value == 2:
            return cls.EXPLICIT
        raise IdentityError(
            IdentityVariant.Range,
            f"identity source {value!r} is not DEFAULT_DERIVED (1) or EXPLICIT (2)",
            field="source",
            value=value,
        )

    def to_json(self) -> str:
        """The snake_case serde name, ``default_derived`` or ``explicit``."""
        return self.value

    @classmethod
    def from_json(cls, value: Any) -> IdentitySource:
        """From the snake_case serde name; any other value is refused."""
        try:
            return cls(_json_str(value, "source"))
        except ValueError:
            raise IdentityError(
                IdentityVariant.Json,
                f"unknown identity source {value!r}",
                field="source",
                value=value,
            ) from None


@dataclass(frozen=True, slots=True)
class ExplicitIdentityMap:
    """Operator-chosen identity material replacing the defaults: 1..=32 unique keys.

    Keys are non-empty and at most 128 UTF-8 bytes; values non-empty and at most 1024. Stored
    sorted by key (upstream's ``BTreeMap``), so insertion order never changes the digest.
    """

    entries: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        entries: Any = self.entries
        items: list[tuple[Any, Any]] = (
            list(entries.items()) if isinstance(entries, Mapping) else [(k, v) for k, v in entries]
        )
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise _spec_error("DuplicateKey", f"duplicate explicit identity key `{dup}`", key=dup)
        for k, v in items:
            if not isinstance(k, str) or not isinstance(v, str):
                raise _spec_error(
                    "NotString",
                    f"explicit identity entries must be strings: {k!r}: {v!r}",
                    key=str(k),
                )
        ordered = tuple(sorted((str(k), str(v)) for k, v in items))
        _validate_entries(ordered)
        object.__setattr__(self, "entries", ordered)

    @classmethod
    def of(cls, entries: Mapping[str, str] | Iterable[tuple[str, str]]) -> ExplicitIdentityMap:
        items = tuple(entries.items()) if isinstance(entries, Mapping) else tuple(entries)
        return cls(items)

    def as_dict(self) -> dict[str, str]:
        return dict(self.entries)

    def to_json(self) -> dict[str, str]:
        return dict(self.entries)

    @classmethod
    def from_json(cls, value: Any) -> ExplicitIdentityMap:
        obj = _json_obj(value, "ExplicitIdentityMap")
        return cls(
            tuple((k, _json_str(v, f"explicit identity value for `{k}`")) for k, v in obj.items())
        )

    @classmethod
    def from_json_text(cls, text: str | bytes) -> ExplicitIdentityMap:
        """Parse JSON text, refusing duplicate keys as upstream's visitor does."""

        def pairs(items: list[tuple[str, Any]]) -> Any:
            return items

        raw = json.loads(text, object_pairs_hook=pairs)
        if not isinstance(raw, list):
            raise IdentityError(
                IdentityVariant.Json, "explicit identity map JSON must be an object", value=raw
            )
        return cls(tuple((k, _json_str(v, f"explicit identity value for `{k}`")) for k, v in raw))


def _validate_entries(entries: tuple[tuple[str, str], ...]) -> None:
    if not entries:
        raise _spec_error("Empty", "explicit identity map must contain at least one entry")
    if len(entries) > MAX_EXPLICIT_IDENTITY_ENTRIES:
        raise _spec_error(
            "TooManyEntries",
            f"explicit identity map contains more than {MAX_EXPLICIT_IDENTITY_ENTRIES} entries "
            f"({len(entries)})",
        )
    for key, value in entries:
        if not key:
            raise _spec_error("EmptyKey", "explicit identity key must not be empty", key=key)
        if len(key.encode("utf-8")) > MAX_EXPLICIT_IDENTITY_KEY_BYTES:
            raise _spec_error(
                "KeyTooLong",
                f"explicit identity key exceeds {MAX_EXPLICIT_IDENTITY_KEY_BYTES} UTF-8 bytes: "
                f"`{key}`",
                key=key,
            )
        if not value:
            raise _spec_error(
                "EmptyValue", f"explicit identity value for `{key}` must not be empty", key=key
            )
        if len(value.encode("utf-8")) > MAX_EXPLICIT_IDENTITY_VALUE_BYTES:
            raise _spec_error(
                "ValueTooLong",
                f"explicit identity value for `{key}` exceeds "
                f"{MAX_EXPLICIT_IDENTITY_VALUE_BYTES} UTF-8 bytes",
                key=key,
            )


def _framed(out: bytearray, value: bytes) -> None:
    out += len(value).to_bytes(4, "little")
    out += value


def _selected_material(
    out: bytearray, defaults: Sequence[str], explicit: ExplicitIdentityMap | None
) -> None:
    if explicit is not None:
        out += len(explicit.entries).to_bytes(4, "little")
        for key, value in explicit.entries:
            _framed(out, key.encode("utf-8"))
            _framed(out, value.encode("utf-8"))
    else:
        out += len(defaults).to_bytes(4, "little")
        for value in defaults:
            _framed(out, value.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class CanonicalIdentityMaterial:
    """The exact bytes BLAKE3 digests into a pool-identity component, and their source.

    Every string is u32-LE-length-framed, so adjacent inputs can never run together.
    """

    source: IdentitySource
    material: bytes

    @classmethod
    def cache_semantics(
        cls,
        defaults: Sequence[str],
        explicit: ExplicitIdentityMap | None,
        kv_block_size: int,
        event_hash_format: int | KvQueryHashFormat,
    ) -> CanonicalIdentityMaterial:
        """``framed(tag) ‖ items ‖ u32le(kv_block_size) ‖ u16le(identity_version)``."""
        bs = _int_in(kv_block_size, 32, "kv_block_size")
        fmt = _int_in(int(event_hash_format), 16, "event_hash_format")
        source, tag = (
            (IdentitySource.EXPLICIT, _CACHE_SEMANTICS_EXPLICIT_V1)
            if explicit is not None
            else (IdentitySource.DEFAULT_DERIVED, _CACHE_SEMANTICS_DEFAULT_V1)
        )
        out = bytearray()
        _framed(out, tag)
        _selected_material(out, _strs(defaults), explicit)
        out += bs.to_bytes(4, "little") + fmt.to_bytes(2, "little")
        return cls(source, bytes(out))

    @classmethod
    def routing_scope(
        cls, defaults: Sequence[str], explicit: ExplicitIdentityMap | None
    ) -> CanonicalIdentityMaterial:
        """``framed(tag) ‖ items`` (defaults are ``[namespace, component, endpoint]``)."""
        source, tag = (
            (IdentitySource.EXPLICIT, _ROUTING_SCOPE_EXPLICIT_V1)
            if explicit is not None
            else (IdentitySource.DEFAULT_DERIVED, _ROUTING_SCOPE_DEFAULT_V1)
        )
        out = bytearray()
        _framed(out, tag)
        _selected_material(out, _strs(defaults), explicit)
        return cls(source, bytes(out))

    def digest16(self) -> bytes:
        """``BLAKE3(material)[:16]``."""
        return blake3.blake3(self.material).digest()[:16]


def _strs(values: Sequence[str]) -> list[str]:
    if isinstance(values, str):
        raise IdentityError(
            IdentityVariant.Json,
            "defaults must be a sequence of strings, not one str",
            value=values,
        )
    out = list(values)
    for v in out:
        if not isinstance(v, str):
            raise IdentityError(
                IdentityVariant.Json, f"identity default {v!r} is not a str", value=v
            )
    return out


def _parse_hex(value: str, n_bytes: int, what: str) -> bytes:
    if (
        not isinstance(value, str)
        or len(value) != 2 * n_bytes
        or any(c not in "0123456789abcdef" for c in value)
    ):
        raise IdentityError(
            IdentityVariant.Parse,
            f"{what} must be exactly {2 * n_bytes} lowercase hex digits, got {value!r}",
            field=what,
            value=value,
        )
    return bytes.fromhex(value)


def _digest_from_json(value: Any, what: str) -> bytes:
    if not isinstance(value, list) or len(value) != 16:
        raise IdentityError(
            IdentityVariant.Json, f"{what}.digest must be an array of 16 bytes", value=value
        )
    for b in value:
        if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b <= 255:
            raise IdentityError(
                IdentityVariant.Json, f"{what}.digest byte {b!r} is not a u8", value=value
            )
    return bytes(value)


@dataclass(frozen=True, slots=True, order=True)
class _DigestIdentity:
    digest: bytes
    source: IdentitySource = field(compare=True)

    def __post_init__(self) -> None:
        if not isinstance(self.digest, (bytes, bytearray)) or len(self.digest) != 16:
            raise IdentityError(
                IdentityVariant.Range,
                f"{type(self).__name__} digest must be exactly 16 bytes",
                field="digest",
                value=self.digest,
            )
        object.__setattr__(self, "digest", bytes(self.digest))
        if not isinstance(self.source, IdentitySource):
            raise IdentityError(
                IdentityVariant.Json, f"source must be an IdentitySource, got {self.source!r}"
            )

    def __str__(self) -> str:
        return self.digest.hex()

    @classmethod
    def parse(cls, text: str) -> Any:
        """Upstream ``FromStr``: 32 lowercase hex digits; the source is ``Explicit``."""
        return cls(_parse_hex(text, 16, cls.__name__), IdentitySource.EXPLICIT)

    def to_json(self) -> dict[str, Any]:
        return {"digest": list(self.digest), "source": self.source.to_json()}

    @classmethod
    def from_json(cls, value: Any) -> Any:
        obj = _json_obj(value, cls.__name__)
        return cls(
            _digest_from_json(_json_field(obj, "digest", cls.__name__), cls.__name__),
            IdentitySource.from_json(_json_field(obj, "source", cls.__name__)),
        )


@dataclass(frozen=True, slots=True, order=True)
class CacheSemanticsId(_DigestIdentity):
    """Which cached KV a pool holds: model artefact (or explicit map), block size, hash format."""

    @classmethod
    def from_material(cls, material: CanonicalIdentityMaterial) -> CacheSemanticsId:
        """The id of ``material``: its ``digest16()``, keeping its source."""
        return cls(material.digest16(), material.source)


@dataclass(frozen=True, slots=True, order=True)
class RoutingScopeId(_DigestIdentity):
    """Which routing scope a pool belongs to: its serving endpoint (or an explicit map)."""

    @classmethod
    def from_material(cls, material: CanonicalIdentityMaterial) -> RoutingScopeId:
        """The id of ``material``: its ``digest16()``, keeping its source."""
        return cls(material.digest16(), material.source)


def derive_cache_semantics_id(
    defaults: Sequence[str],
    kv_block_size: int,
    event_hash_format: int | KvQueryHashFormat,
    explicit: ExplicitIdentityMap | None = None,
) -> CacheSemanticsId:
    """The relay's ``CacheSemanticsId``: defaults are ``[card.source_path()]``.

    ``event_hash_format`` is the format's ``identity_version`` (standard 1, EAGLE 2), so the
    same card at another block size or in EAGLE mode is a different, non-colliding pool.
    """
    return CacheSemanticsId.from_material(
        CanonicalIdentityMaterial.cache_semantics(
            defaults, explicit, kv_block_size, event_hash_format
        )
    )


def derive_routing_scope_id(
    defaults: Sequence[str], explicit: ExplicitIdentityMap | None = None
) -> RoutingScopeId:
    """The relay's ``RoutingScopeId``: defaults are ``[namespace, component, endpoint]``."""
    return RoutingScopeId.from_material(CanonicalIdentityMaterial.routing_scope(defaults, explicit))


@dataclass(frozen=True, slots=True, order=True)
class DcId:
    """A logical DC's stable u64; displays as 16 lowercase hex digits."""

    value: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _int_in(self.value, 64, "dc_id"))

    def __str__(self) -> str:
        return f"{self.value:016x}"

    def __int__(self) -> int:
        return self.value

    @classmethod
    def parse(cls, text: str) -> DcId:
        """Upstream ``FromStr``: exactly 16 lowercase hex digits, as the id displays."""
        return cls(int.from_bytes(_parse_hex(text, 8, "DcId"), "big"))

    def to_json(self) -> int:
        """The u64 as a bare JSON integer (not the hex display form)."""
        return self.value

    @classmethod
    def from_json(cls, value: Any) -> DcId:
        """From a bare JSON integer (a bool is refused), checked as a u64."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise IdentityError(
                IdentityVariant.Json, f"dc_id must be an integer, got {value!r}", value=value
            )
        return cls(value)


def stable_dc_id(name: str) -> DcId:
    """``u64_le(BLAKE3("dynamo/indexer-dc/v1" ‖ u32le(len) ‖ utf8(name))[:8])``: a DC's id."""
    data = name.encode("utf-8")
    digest = blake3.blake3(_DC_ID_DOMAIN + len(data).to_bytes(4, "little") + data).digest()
    return DcId(int.from_bytes(digest[:8], "little"))


def _split_once(text: str, sep: str, field: str, what: str, form: str) -> tuple[str, str]:
    """``text`` split at its only ``sep``, or the parse error upstream's ``FromStr`` gives."""
    left, found, right = text.partition(sep)
    if not found or sep in right:
        raise IdentityError(
            IdentityVariant.Parse, f"{what} must be `{form}`, got {text!r}", field=field, value=text
        )
    return left, right


@dataclass(frozen=True, slots=True, order=True)
class IndexerDomainId:
    """One logical indexer: cache semantics × routing scope. Displays as ``cs:rs``."""

    cache_semantics: CacheSemanticsId
    routing_scope: RoutingScopeId

    def __str__(self) -> str:
        return f"{self.cache_semantics}:{self.routing_scope}"

    @property
    def relies_on_defaults(self) -> bool:
        """Either component was default-derived (joining DCs on it deserves a warning)."""
        return IdentitySource.DEFAULT_DERIVED in (
            self.cache_semantics.source,
            self.routing_scope.source,
        )

    @classmethod
    def parse(cls, text: str) -> IndexerDomainId:
        """Upstream ``FromStr``: ``<cache-semantics-id>:<routing-scope-id>``, both ``Explicit``."""
        cs, rs = _split_once(
            text,
            ":",
            "IndexerDomainId",
            "indexer domain",
            "<cache-semantics-id>:<routing-scope-id>",
        )
        return cls(CacheSemanticsId.parse(cs), RoutingScopeId.parse(rs))

    def to_json(self) -> dict[str, Any]:
        """Serde's object: ``cache_semantics`` and ``routing_scope``, each
        ``{"digest": [16 u8], "source": ...}``."""
        return {
            "cache_semantics": self.cache_semantics.to_json(),
            "routing_scope": self.routing_scope.to_json(),
        }

    @classmethod
    def from_json(cls, value: Any) -> IndexerDomainId:
        """Read :meth:`to_json`'s object back."""
        obj = _json_obj(value, "IndexerDomainId")
        return cls(
            CacheSemanticsId.from_json(_json_field(obj, "cache_semantics", "IndexerDomainId")),
            RoutingScopeId.from_json(_json_field(obj, "routing_scope", "IndexerDomainId")),
        )


@dataclass(frozen=True, slots=True, order=True)
class PoolId:
    """One DC-local producer pool in an indexer domain. Displays as ``cs:rs/dc``."""

    indexer_domain: IndexerDomainId
    dc_id: DcId

    def __str__(self) -> str:
        return f"{self.indexer_domain}/{self.dc_id}"

    @classmethod
    def parse(cls, text: str) -> PoolId:
        """Upstream ``FromStr``: ``<indexer-domain-id>/<dc-id>``, as the id displays."""
        domain, dc = _split_once(text, "/", "PoolId", "pool ID", "<indexer-domain-id>/<dc-id>")
        return cls(IndexerDomainId.parse(domain), DcId.parse(dc))

    def to_json(self) -> dict[str, Any]:
        """Serde's object: ``indexer_domain`` and ``dc_id`` (the u64 as a JSON integer)."""
        return {"indexer_domain": self.indexer_domain.to_json(), "dc_id": self.dc_id.to_json()}

    @classmethod
    def from_json(cls, value: Any) -> PoolId:
        """Read :meth:`to_json`'s object back."""
        obj = _json_obj(value, "PoolId")
        return cls(
            IndexerDomainId.from_json(_json_field(obj, "indexer_domain", "PoolId")),
            DcId.from_json(_json_field(obj, "dc_id", "PoolId")),
        )


@dataclass(frozen=True, slots=True)
class DcCkfFormatIdentity:
    """The physical CKF layout a consumer must share with a producer to read its words.

    The constructor validates as the relay wire validator does: ``(1, seed, bucket_count, 16,
    4)`` with ``bucket_count`` a power of two in ``2..=2**24``. Upstream's struct itself is
    unchecked (``DcCkfFormatIdentity::new(seed, bucket_count)`` fills in the CBI1 shape and serde
    deserialises any field values; ``publication/codec.rs`` then gates the shape and raises
    ``UnsupportedFormatIdentity``), so :meth:`unchecked` builds one without validation for the
    publication gate to see, and :meth:`check` re-applies the validation. Field order of the
    constructor puts the two free fields first; the JSON follows upstream's declaration order.
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
        return {
            "format_version": self.format_version,
            "seed": self.seed,
            "bucket_count": self.bucket_count,
            "fingerprint_bits": self.fingerprint_bits,
            "slots_per_bucket": self.slots_per_bucket,
        }

    @classmethod
    def from_json(cls, value: Any) -> DcCkfFormatIdentity:
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
        return {"lease": self.lease.to_json(), "expected_sequence": self.expected_sequence}

    @classmethod
    def from_json(cls, value: Any) -> ConsumerDrainMarker:
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
