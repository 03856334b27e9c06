"""Block and sequence hashes (standard, EAGLE, LoRA, namespace, multimodal), exact xxh3, and the
model / pool / producer identities every later stage keys on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import attach

if TYPE_CHECKING:
    from cbi1kit.hashing._blocks import (
        compute_block_hash_for_seq as compute_block_hash_for_seq,
        compute_seq_hash_batch as compute_seq_hash_batch,
        compute_seq_hash_for_block as compute_seq_hash_for_block,
        compute_seq_hash_ragged as compute_seq_hash_ragged,
        hash_mm_identifier as hash_mm_identifier,
        lora_name_to_id as lora_name_to_id,
    )
    from cbi1kit.hashing._dc_names import dc_text as dc_text, learn_dc_names as learn_dc_names
    from cbi1kit.hashing._formats import (
        KvQueryHashFormat as KvQueryHashFormat,
        KvQuerySemantics as KvQuerySemantics,
    )
    from cbi1kit.hashing._identity import (
        MAX_LANES as MAX_LANES,
        ConsumerInstanceId as ConsumerInstanceId,
        LaneLease as LaneLease,
        ProducerIdentity as ProducerIdentity,
    )
    from cbi1kit.hashing._models import (
        CanonicalModelId as CanonicalModelId,
        CanonicalModelRegistration as CanonicalModelRegistration,
        ModelAlias as ModelAlias,
        ModelTarget as ModelTarget,
        resolve_lora_name as resolve_lora_name,
        resolve_registration as resolve_registration,
    )
    from cbi1kit.hashing._pools import (
        CacheSemanticsId as CacheSemanticsId,
        DcId as DcId,
        IdentitySource as IdentitySource,
        IndexerDomainId as IndexerDomainId,
        PoolId as PoolId,
        RoutingScopeId as RoutingScopeId,
        stable_dc_id as stable_dc_id,
    )
else:
    __getattr__, __dir__, __all__ = attach(__name__, __file__)
