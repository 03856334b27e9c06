"""Hash formats and query semantics: the one token to sequence-hash contract a pool's CKF
answers for (block size, EAGLE or standard windows).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from cbi1kit.errors import IdentityError, IdentityVariant
from cbi1kit.hashing._blocks import compute_block_hash_for_seq, compute_seq_hash_for_block
from cbi1kit.hashing._fields import _json_field, _json_obj, _json_str, _json_uint


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
