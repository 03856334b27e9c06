"""Why a global router sees the prefix it sees: one request, step by step, against the consumer
tables of a capture at one moment.

A router's answer is a prefix depth per DC lane; behind it lie the catalog's query semantics for the
model, the request's block hashes, each block's fingerprint and two buckets, and the words each lane
held. :func:`explain` shows each step by the package's one implementation of it (hashing,
``CkfAddressing``, the global view, ``find_prefix_depths``) and replay's history of where a
fingerprint came from or left (per lane: :mod:`cbi1kit.analysis._explain_lane`). A 16-bit
fingerprint match is a true or false positive only to who knows the producer (``truth=``).
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from cbi1kit.analysis._explain_lane import (
    BlockAddress,
    LaneBlock,
    LaneExplanation,
    Lookup,
    Truth,
    explain_lane,
)
from cbi1kit.analysis._global import (
    At,
    DomainView,
    GlobalView,
    ViewLane,
    build_global_view,
    format_unix_ns,
)
from cbi1kit.analysis._replay import ReplayReport, _dc_value
from cbi1kit.ckf._limits import DEFAULT_VERIFICATION_WINDOW, verification_window_fault
from cbi1kit.errors import (
    HashingError,
    HashingVariant,
    IdentityError,
    IdentityVariant,
    LaneError,
    LaneVariant,
)
from cbi1kit.hashing._dc_names import dc_fields, dc_text
from cbi1kit.hashing._formats import KvQueryHashFormat, KvQuerySemantics
from cbi1kit.hashing._identity import DcCkfFormatIdentity
from cbi1kit.hashing._models import CanonicalModelRegistration, resolve_registration
from cbi1kit.hashing._pools import DcId, IdentitySource, IndexerDomainId, PoolId, stable_dc_id
from cbi1kit.relay._messages import PoolDescriptor

_U64: Final = (1 << 64) - 1
_FNV_OFFSET: Final = 0xCBF29CE484222325
_FNV_PRIME: Final = 0x100000001B3


class BlockRequest(Protocol):
    """A request of a trace (``Workload.request(i)``): its blocks' local hashes under an
    adapter's salt, and the block size and hash format it was cut with."""

    @property
    def block_size(self) -> int:
        """Tokens per block the request was cut with."""

    @property
    def hash_format(self) -> KvQueryHashFormat:
        """The hash format its block hashes are in."""

    def block_hashes(self, lora_name: str | None) -> npt.NDArray[np.uint64]:
        """The blocks' local hashes under ``lora_name``'s salt."""


def stable_pool_rank(key: int, pool: PoolId) -> int:
    """The global gateway's request-keyed tie rank of a pool (``stable_pool_rank``: FNV-1a 64
    from ``0xcbf29ce484222325 ^ key`` over the cache-semantics digest and source byte, the
    routing-scope digest and source byte (default-derived 0, explicit 1) and the DC id, big
    endian); the lowest rank wins a tie."""
    domain = pool.indexer_domain
    data = b"".join(
        (
            domain.cache_semantics.digest,
            bytes([_source_byte(domain.cache_semantics.source)]),
            domain.routing_scope.digest,
            bytes([_source_byte(domain.routing_scope.source)]),
            pool.dc_id.value.to_bytes(8, "big"),
        )
    )
    h = _FNV_OFFSET ^ (key & _U64)
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _U64
    return h


def _source_byte(source: IdentitySource) -> int:
    return 0 if source is IdentitySource.DEFAULT_DERIVED else 1


@dataclass(frozen=True, slots=True, eq=False)
class Explanation:
    """A request explained against the consumer tables at ``at`` (see :func:`explain`): ``ranking``
    lists the ready lanes in the router's order, ``preferred`` the first, ``tied`` every ready lane
    at the deepest depth. Upstream's table answers only a depth per lane (``global.rs``,
    ``GlobalCkfIndexer::find_prefix_matches``; ``search.rs``'s test-only ``MaxDepthMatches`` ties
    the deepest); the gateway's ``select_pool`` (a crate over ``dynamo_kv_router`` found by content,
    relay.md §6) orders by projected uncached prefill time, occupancy, the local DC,
    ``stable_pool_rank`` of a tie key, then pool id. The stream carries neither of the first two,
    so: deepest lane, then ``local_dc``, then lowest ``stable_pool_rank`` for ``tie_key``, then
    lowest pool id."""

    model: str
    lora: str | None
    registration: CanonicalModelRegistration
    semantics: KvQuerySemantics
    catalog_revision: int
    at: At | None
    unix_ns: int | None
    indexer_domain: IndexerDomainId
    format: DcCkfFormatIdentity
    tokens: int | None
    blocks: tuple[BlockAddress, ...]
    lanes: tuple[LaneExplanation, ...]
    verification_window: int
    ranking: tuple[int, ...]
    local_dc: DcId | None = None
    tie_key: int | None = None

    @property
    def lora_name(self) -> str | None:
        """The adapter that salts the request's block hashes (the canonical one, not an alias)."""
        return self.registration.lora_name

    @property
    def truth_known(self) -> bool:
        """Whether what some lane's producer holds was given (``truth=``), so matches can be
        told true or false."""
        return any(n.truth_known for n in self.lanes)

    def lane(self, index: int) -> LaneExplanation:
        """Lane ``index``'s explanation; ``StopIteration`` if the table has no such lane."""
        return next(n for n in self.lanes if n.lane == index)

    @property
    def preferred(self) -> LaneExplanation | None:
        """The lane the router prefers (first in ``ranking``), or None when none is ready."""
        return self.lane(self.ranking[0]) if self.ranking else None

    @property
    def tied(self) -> tuple[LaneExplanation, ...]:
        """Every ready lane at the preferred lane's depth, in ranking order."""
        best = self.preferred
        if best is None:
            return ()
        return tuple(self.lane(i) for i in self.ranking if self.lane(i).depth == best.depth)

    def tie_rule(self) -> str:
        """How the preferred lane was told from the lanes tied with it, in words."""
        if len(self.tied) <= 1:
            return "deepest prefix"
        steps = []
        if self.local_dc is not None:
            held = any(n.dc_id == self.local_dc for n in self.tied)
            steps.append(
                f"the local DC {self.local_dc}" + ("" if held else " (no tied lane is in it)")
            )
        if self.tie_key is not None:
            steps.append(f"the lowest stable rank for tie key 0x{self.tie_key:x}")
        steps.append("the lowest pool id")
        return f"a tie at depth {self.tied[0].depth}, broken by " + ", then ".join(steps)

    # -- rendering ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, object]:
        """JSON-ready, the u64 seed and DC ids as hex; with the lanes, ranking, preferred lane and
        tie rule."""
        best = self.preferred
        reg = self.registration
        return {
            "model": self.model,
            "lora": self.lora,
            "registration": reg.to_json(),
            "lora_name": self.lora_name,
            "query_semantics": self.semantics.to_json(),
            "catalog_revision": self.catalog_revision,
            "at": None if self.at is None else str(self.at),
            "unix_ns": self.unix_ns,
            "indexer_domain": str(self.indexer_domain),
            "seed": f"0x{self.format.seed:016x}",
            "bucket_count": self.format.bucket_count,
            "tokens": self.tokens,
            "blocks": [b.to_dict() for b in self.blocks],
            "verification_window": self.verification_window,
            "lanes": [n.to_dict() for n in self.lanes],
            "ranking": list(self.ranking),
            "preferred": None
            if best is None
            else {"lane": best.lane, **dc_fields(best.dc_id.value), "depth": best.depth},
            "tied": [n.lane for n in self.tied],
            "tie_rule": self.tie_rule() if best is not None else None,
            "truth": "known" if self.truth_known else "unknown",
        }

    def __rich__(self) -> RenderableType:
        return Group(*self._parts())

    def __str__(self) -> str:
        return _plain(self)

    def __repr__(self) -> str:
        """One line of key figures (``str()`` is the whole explanation)."""
        when = "" if self.at is None else f" at {self.at}"
        ready = sum(n.ready for n in self.lanes)
        best = self.preferred
        pick = "none ready"
        if best is not None:
            dc = dc_text(best.dc_id.value)
            pick = f"preferred lane {best.lane} (DC {dc}) at depth {best.depth}"
        return (
            f"<Explanation {self.model!r}{when}: {len(self.blocks)} block(s), "
            f"{len(self.lanes)} lane(s), {ready} ready; {pick}>"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """A notebook shows the explanation, not the dataclass."""
        printer.text(str(self))

    def _parts(self) -> Iterable[RenderableType]:
        sem, reg = self.semantics, self.registration
        when = "at the end of every lane" if self.at is None else f"at {self.at}"
        if self.unix_ns is not None and (self.at is None or self.at.unix_ns is None):
            when += f" ({format_unix_ns(self.unix_ns)})"
        yield Text(f"== explain: model {self.model!r} {when}", style="bold")
        target = (
            "base model"
            if reg.lora_name is None
            else f"LoRA adapter {reg.lora_name!r} of {reg.target.base_model}"
        )
        aliases = ", ".join(a.value for a in reg.aliases) or "-"
        yield Text(
            f"1. catalog revision {self.catalog_revision}: registration {reg.model} ({target}; "
            f"aliases {aliases}); kv_block_size {sem.kv_block_size}, hash format "
            f"{sem.hash_format.serde_name}; block hashes salted with "
            + ("no adapter" if reg.lora_name is None else f"adapter {reg.lora_name!r}")
        )
        fmt = self.format
        size = "the request's " if self.tokens is None else f"{self.tokens} tokens → "
        yield Text(
            f"2. {size}{len(self.blocks)} block(s); addressing of the indexer domain "
            f"{self.indexer_domain}: seed 0x{fmt.seed:016x}, {fmt.bucket_count} buckets"
        )
        blocks = _table("block", "local hash", "sequence hash", "fingerprint", "bucket a", "b")
        for b in self.blocks:
            blocks.add_row(
                str(b.index),
                f"{b.local_hash:016x}",
                f"{b.sequence_hash:016x}",
                f"{b.fingerprint:04x}",
                str(b.bucket_a),
                str(b.bucket_b),
            )
        yield blocks
        yield Text(
            f"3. each DC lane ({len(self.lanes)}), prefix search with verification window "
            f"{self.verification_window}"
        )
        for n in self.lanes:
            yield from _lane_parts(n)
        best = self.preferred
        if best is None:
            yield Text("4. no lane is ready: the router has no answer (upstream: Unavailable)")
        else:
            tokens = (best.depth or 0) * sem.kv_block_size
            yield Text(
                f"4. the router prefers DC {dc_text(best.dc_id.value)} (lane {best.lane}): depth "
                f"{best.depth} block(s) = {tokens} tokens; {self.tie_rule()}",
                style="bold",
            )
        if not self.truth_known:
            yield Text(
                "   a match is a true or a false positive only for who knows what the producer "
                "holds: from the consumer's side (16-bit fingerprints) it cannot be told "
                "(pass truth=)"
            )


def _table(*columns: str) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in columns:
        table.add_column(name, no_wrap=True)
    return table


def _lane_parts(n: LaneExplanation) -> Iterable[RenderableType]:
    head = f"-- lane {n.lane}, DC {dc_text(n.dc_id.value)}: "
    if not n.ready:
        yield Text(head + n.why)
        return
    when = "" if n.unix_ns is None else f", received {format_unix_ns(n.unix_ns)}"
    yield Text(head + f"ready at sequence {n.sequence}{when} (stream {n.stream_id})")
    if n.stale and n.touched_unix_ns is not None:
        yield Text(
            f"   stale: its last message came {format_unix_ns(n.touched_unix_ns)}, longer "
            "than max_age before the moment; the scorer gives it no score (not ranked)"
        )
    yield _block_rows(n)
    if n.first_missing is None:
        broke = "every block is held"
    else:
        broke = f"the chain breaks at block {n.first_missing}"
        broke += (
            f": its fingerprint left both buckets with {n.removed}"
            if n.removed is not None
            else ": the lane never held its fingerprint in this capture"
        )
    note = ""
    if n.first_missing is not None and n.depth is not None and n.depth > n.first_missing:
        note = " (the search is advisory: it sampled past the hole)"
    yield Text(f"   prefix depth {n.depth}{note}; {broke}")


def _block_rows(n: LaneExplanation) -> Table:
    """The lane's blocks, a run that looks the same (not held; or held in the same side of
    their buckets since the same change) in one row: ``bucket`` then says ``a ×16``."""
    columns = ["block", "held", "bucket", "slot", "since"] + ["truth"] * n.truth_known
    rows = _table(*columns)
    for run in _runs(n.blocks):
        first, last = run[0], run[-1]
        one = len(run) == 1
        cells = [
            str(first.index) if one else f"{first.index}-{last.index}",
            "yes" if first.held else "no",
            "-"
            if first.bucket is None
            else f"{first.side} {first.bucket if one else f'×{len(run)}'}",
            "-" if first.slot is None or not one else str(first.slot),
            "-" if first.since is None else str(first.since),
        ]
        truth = "-" if first.truth is Truth.UNKNOWN else first.truth.value
        rows.add_row(*cells, *[truth] * n.truth_known)
    return rows


def _runs(blocks: Sequence[LaneBlock]) -> list[list[LaneBlock]]:
    """Consecutive blocks alike in what the lane table shows of a run."""
    alike = itertools.groupby(blocks, key=lambda b: (b.held, b.side, b.since, b.truth))
    return [list(run) for _, run in alike]


def _plain(renderable: Any, width: int = 1000) -> str:
    """A rich renderable as plain text: no colour, lines as long as they are."""
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, highlight=False).print(renderable)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


# --------------------------------------------------------------------------- the request


def _descriptor(view: GlobalView, domain: DomainView, model: str) -> tuple[PoolDescriptor, int]:
    """The catalog's descriptor of the domain's first pool serving ``model``, and its
    catalog revision (one domain is one block size and hash format: cache semantics)."""
    pools = {n.pool for n in domain.lanes}
    for catalog in view.catalogs:
        for desc in catalog.pools:
            if desc.producer.pool_id in pools and desc.serves(model):
                return desc, catalog.revision
    raise IdentityError(  # pragma: no cover - the view's lanes are the catalog's pools
        IdentityVariant.UnknownModel,
        f"no catalog pool of the domain serves {model!r}",
        field="model",
    )


def _registration(desc: PoolDescriptor, model: str, lora: str | None) -> CanonicalModelRegistration:
    """The registration a request naming ``model`` (or, with ``lora``, that alias) resolves to,
    as upstream resolves it: the first advertised registration naming it."""
    reg = resolve_registration(desc.registrations, model if lora is None else lora)
    if lora is not None and reg.lora_name is None:
        raise IdentityError(
            IdentityVariant.NotALora,
            f"{lora!r} names the base model {reg.model} of pool {desc.producer.pool_id}, not a "
            "LoRA adapter",
            field="lora",
            value=lora,
        )
    return reg


def _local_hashes(
    semantics: KvQuerySemantics, lora_name: str | None, tokens: Any, request: BlockRequest | None
) -> tuple[npt.NDArray[np.uint64], int | None]:
    if (tokens is None) == (request is None):
        raise HashingError(
            HashingVariant.BlockHashArgument,
            "explain takes tokens= or request= (one of them)",
            field="tokens",
        )
    if request is not None:
        if (request.block_size, request.hash_format) != (
            semantics.kv_block_size,
            semantics.hash_format,
        ):
            raise IdentityError(
                IdentityVariant.QuerySemantics,
                f"the request was cut into blocks of {request.block_size} tokens "
                f"({request.hash_format.serde_name}); the catalog's pools hash blocks of "
                f"{semantics.kv_block_size} ({semantics.hash_format.serde_name})",
                field="request",
            )
        local = np.asarray(request.block_hashes(lora_name), dtype=np.uint64)
        count = None
    else:
        if isinstance(tokens, Iterator):
            tokens = list(tokens)
        local = semantics.block_hashes(tokens, lora_name=lora_name)
        count = len(tokens) if hasattr(tokens, "__len__") else None
    if local.size == 0:
        window = semantics.kv_block_size + (1 if semantics.hash_format.is_eagle else 0)
        what = "the request has no block" if count is None else f"{count} token(s)"
        raise HashingError(
            HashingVariant.TooFewTokens,
            f"{what}: a block needs {window} tokens ({semantics.hash_format.serde_name}, "
            f"kv_block_size {semantics.kv_block_size}); nothing to look up",
            field="tokens",
        )
    return local, count


# ------------------------------------------------------------------------------- the lanes


class Resident(Protocol):
    """A producer that says what it holds (``DcCkfState``)."""

    def resident_canonicals(self) -> Iterable[int]:
        """The canonical sequence hashes it holds."""
        ...


#: what a producer holds, as ``explain(truth=)`` takes it: a producer, or its hashes (u64)
Holdings = Resident | npt.NDArray[np.uint64] | Iterable[int]
#: ``truth=``: one producer's holdings (a single lane), or holdings by DC (id, ``DcId``, hex, name)
HoldingsByDc = Holdings | Mapping[int | str | DcId, Holdings]


def _holdings(value: Holdings) -> set[int]:
    """What a producer holds: its canonical sequence hashes (a ``DcCkfState``'s residents, an
    array or any collection of u64)."""
    if hasattr(value, "resident_canonicals"):
        value = value.resident_canonicals()
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "ui":
            raise HashingError(
                HashingVariant.BlockHashArgument,
                f"truth= holds {value.dtype} values, not u64 hashes",
            )
        return set(value.astype(np.uint64).tolist())
    out: set[int] = set()
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) <= _U64:
            raise HashingError(
                HashingVariant.BlockHashArgument, f"truth= holds {v!r}, not a u64 hash"
            )
        out.add(int(v))
    return out


def _truth_by_lane(truth: HoldingsByDc | None, lanes: Sequence[ViewLane]) -> dict[int, set[int]]:
    """``truth=`` per lane: a mapping from DC (id, ``DcId``, hex or name) to holdings, or one
    holdings when the domain has a single lane."""
    if truth is None:
        return {}
    if not isinstance(truth, Mapping):
        if len(lanes) != 1:
            raise LaneError(
                LaneVariant.SeveralLanes,
                message=f"truth= must say which DC holds what: the table has {len(lanes)} "
                "lanes (give a mapping from DC to its producer's hashes)",
            )
        return {lanes[0].lane: _holdings(truth)}
    out: dict[int, set[int]] = {}
    for dc, held in truth.items():
        ids = _dc_value(dc)
        match = [n for n in lanes if n.pool.dc_id.value in ids]
        if not match:
            known = ", ".join(dc_text(n.pool.dc_id.value) for n in lanes)
            raise LaneError(
                LaneVariant.NoSuchLane,
                message=f"truth= names DC {dc!r}, no lane of the table ({known})",
            )
        out[match[0].lane] = _holdings(held)
    return out


def _ranking(
    lanes: Sequence[LaneExplanation], local_dc: DcId | None, tie_key: int | None
) -> tuple[int, ...]:
    """Ready lanes in the router's order (see :class:`Explanation`)."""

    def key(n: LaneExplanation) -> tuple[int, bool, int, PoolId]:
        return (
            -(n.depth or 0),
            local_dc is not None and n.dc_id != local_dc,
            0 if tie_key is None else stable_pool_rank(tie_key, n.pool),
            n.pool,
        )

    scored = (n for n in lanes if n.ready and not n.stale)
    return tuple(n.lane for n in sorted(scored, key=key))


def _explain_lanes(
    report: ReplayReport, dom: DomainView, lookup: Lookup, truth: HoldingsByDc | None
) -> tuple[LaneExplanation, ...]:
    """Each lane of the domain's table (:func:`explain_lane`), read with its replay's history
    and, where ``truth`` says, what its producer holds."""
    truths = _truth_by_lane(truth, dom.lanes)
    history = {lane.pool: lane for lane in report.lanes if lane.pool is not None}
    return tuple(
        explain_lane(
            n, history.get(n.pool), dom.table.storage[:, n.lane], lookup, truths.get(n.lane)
        )
        for n in dom.lanes
    )


def _pick_domain(view: GlobalView, domain: IndexerDomainId | str | None) -> DomainView:
    domains = view.domains
    if domain is not None:
        want = str(domain)
        domains = [d for d in domains if str(d.indexer_domain).startswith(want)]
    if len(domains) == 1:
        return domains[0]
    names = ", ".join(str(d.indexer_domain) for d in view.domains) or "none"
    if not domains:
        raise LaneError(
            LaneVariant.NoSuchLane,
            message=f"no indexer domain of the view matches (domains: {names})",
        )
    raise LaneError(
        LaneVariant.SeveralDomains,
        message=f"the model's pools span {len(domains)} indexer domains ({names}): one "
        "consumer table each, name one (domain=)",
    )


def _local_dc(value: int | str | DcId | None, lanes: Sequence[ViewLane]) -> DcId | None:
    """The router's own DC: an id, a ``DcId``, 16 hex digits or a DC name (one the table need
    not hold: then no lane is local)."""
    if value is None or isinstance(value, DcId):
        return value
    if isinstance(value, int):
        return DcId(value)
    ids = _dc_value(value)
    for n in lanes:
        if n.pool.dc_id.value in ids:
            return n.pool.dc_id
    return stable_dc_id(value)


def check_verification_window(window: int) -> None:
    """The router's ``PrefixSearchConfig`` rule, before any work: ``LaneError``
    ``Manifest.InvalidVerificationWindow``."""
    if why := verification_window_fault(window):
        raise LaneError(
            LaneVariant.Manifest,
            subvariant="InvalidVerificationWindow",
            message=f"verification_window {why}, got {window}",
        )


def build_explanation(
    report: ReplayReport,
    *,
    model: str,
    tokens: npt.ArrayLike | Sequence[int] | None = None,
    request: BlockRequest | None = None,
    at: At | int | str | datetime | timedelta | None = None,
    max_age: float | timedelta | None = None,
    lora: str | None = None,
    truth: HoldingsByDc | None = None,
    local_dc: int | str | DcId | None = None,
    tie_key: int | None = None,
    domain: IndexerDomainId | str | None = None,
    verification_window: int = DEFAULT_VERIFICATION_WINDOW,
) -> Explanation:
    """Explain how the router sees ``tokens`` (or a trace ``request``) for ``model`` at ``at``: the
    catalog's registration for ``model`` (or LoRA alias ``lora``) and its query semantics; the
    request's block hashes (salted with the canonical adapter), fingerprints and buckets; each DC
    lane (:class:`LaneExplanation`; ``at``, ``max_age`` as :func:`cbi1kit.analysis.global_view`
    takes them) searched with ``verification_window`` (the router's ``PrefixSearchConfig``); the
    router's order (:class:`Explanation`). ``truth`` (:data:`HoldingsByDc`: what the producers hold)
    tells true from false positives and negatives. Errors: ``IdentityError`` ``UnknownModel``,
    ``NotALora``, ``QuerySemantics``; ``LaneError`` ``NoCatalog``, ``SeveralDomains``,
    ``Manifest.InvalidVerificationWindow``; ``HashingError`` ``TooFewTokens`` and others."""
    check_verification_window(verification_window)
    view = build_global_view(report, model=model, at=at, max_age=max_age)
    dom = _pick_domain(view, domain)
    desc, revision = _descriptor(view, dom, model)
    reg = _registration(desc, model, lora)
    local, count = _local_hashes(desc.query_semantics, reg.lora_name, tokens, request)
    lookup = Lookup.of(dom.table, local, verification_window)
    lanes = _explain_lanes(report, dom, lookup, truth)
    local_id = _local_dc(local_dc, dom.lanes)
    key = None if tie_key is None else int(tie_key) & _U64
    return Explanation(
        model,
        lora,
        reg,
        desc.query_semantics,
        revision,
        view.at,
        view.unix_ns,
        dom.indexer_domain,
        dom.table.format,
        count,
        lookup.blocks,
        lanes,
        verification_window,
        _ranking(lanes, local_id, key),
        local_id,
        key,
    )
