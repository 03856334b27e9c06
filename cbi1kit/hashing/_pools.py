"""Pool identity: the material BLAKE3 digests into cache-semantics and routing-scope ids (from
defaults or an explicit map), the DC id, and the indexer domain and pool they make.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import blake3

from cbi1kit.errors import IdentityError, IdentityVariant
from cbi1kit.hashing._fields import _int_in, _json_field, _json_obj, _json_str
from cbi1kit.hashing._formats import KvQueryHashFormat

MAX_EXPLICIT_IDENTITY_ENTRIES = 32
MAX_EXPLICIT_IDENTITY_KEY_BYTES = 128
MAX_EXPLICIT_IDENTITY_VALUE_BYTES = 1024

_CACHE_SEMANTICS_DEFAULT_V1 = b"dynamo/indexer-cache-semantics/default/v1"
_CACHE_SEMANTICS_EXPLICIT_V1 = b"dynamo/indexer-cache-semantics/explicit/v1"
_ROUTING_SCOPE_DEFAULT_V1 = b"dynamo/indexer-routing-scope/default/v1"
_ROUTING_SCOPE_EXPLICIT_V1 = b"dynamo/indexer-routing-scope/explicit/v1"
_DC_ID_DOMAIN = b"dynamo/indexer-dc/v1"


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
        """A map from a mapping or ``(key, value)`` pairs, in their order."""
        items = tuple(entries.items()) if isinstance(entries, Mapping) else tuple(entries)
        return cls(items)

    def as_dict(self) -> dict[str, str]:
        """The entries as a dict."""
        return dict(self.entries)

    def to_json(self) -> dict[str, str]:
        """The entries as upstream's serde JSON object."""
        return dict(self.entries)

    @classmethod
    def from_json(cls, value: Any) -> ExplicitIdentityMap:
        """A map from upstream's serde JSON; every value a string."""
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


def _tagged_material(
    defaults: Sequence[str],
    explicit: ExplicitIdentityMap | None,
    default_tag: bytes,
    explicit_tag: bytes,
) -> tuple[IdentitySource, bytearray]:
    """``framed(tag) ‖ items``: the explicit map's entries under ``explicit_tag`` if there is
    one, else the defaults (checked as strings either way) under ``default_tag``."""
    values = _strs(defaults)
    out = bytearray()
    if explicit is not None:
        _framed(out, explicit_tag)
        out += len(explicit.entries).to_bytes(4, "little")
        for key, value in explicit.entries:
            _framed(out, key.encode("utf-8"))
            _framed(out, value.encode("utf-8"))
        return IdentitySource.EXPLICIT, out
    _framed(out, default_tag)
    out += len(values).to_bytes(4, "little")
    for value in values:
        _framed(out, value.encode("utf-8"))
    return IdentitySource.DEFAULT_DERIVED, out


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
        source, out = _tagged_material(
            defaults, explicit, _CACHE_SEMANTICS_DEFAULT_V1, _CACHE_SEMANTICS_EXPLICIT_V1
        )
        out += bs.to_bytes(4, "little") + fmt.to_bytes(2, "little")
        return cls(source, bytes(out))

    @classmethod
    def routing_scope(
        cls, defaults: Sequence[str], explicit: ExplicitIdentityMap | None
    ) -> CanonicalIdentityMaterial:
        """``framed(tag) ‖ items`` (defaults are ``[namespace, component, endpoint]``)."""
        source, out = _tagged_material(
            defaults, explicit, _ROUTING_SCOPE_DEFAULT_V1, _ROUTING_SCOPE_EXPLICIT_V1
        )
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
