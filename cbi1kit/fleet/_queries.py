"""Fleet queries over the partitioned dataset, as Dask computations and in one process.

Every query is a ``partial`` step run on each partition of the tables it reads (a leaf directory
``dc=/producer=/date=`` of a table: one Dask task each) and a ``combine`` step over the partial
results (one more task). A partial step only groups and adds whole numbers (counts, sums, minima
and maxima), and a combine step adds them up again before it divides, so the distributed result
is exactly the single-process one (:func:`run_local`: the same ``partial`` over each whole table
of :func:`cbi1kit.analysis.open_dataset`, then ``combine``), row for row and bit for bit.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from cbi1kit.analysis._dataset import collect_table, open_dataset, scan_table
from cbi1kit.analysis._schema import with_dc_names
from cbi1kit.ckf._stats import FINGERPRINT_MATCH_PROBABILITY
from cbi1kit.errors import FleetError, FleetVariant
from cbi1kit.fleet._cluster import given_or_local
from cbi1kit.fleet._menu import QUERY_DOCS

if TYPE_CHECKING:
    from distributed import Client

#: a pool: its indexer domain (the two digests) and its DC
POOL: Final = ("cache_semantics", "routing_scope", "dc_id")
_U64 = pl.UInt64


def _sum(name: str, out: str | None = None) -> pl.Expr:
    return pl.col(name).cast(_U64).sum().alias(out or name)


@dataclass(frozen=True, slots=True)
class Query:
    """A fleet query: the tables it reads, its step per partition, its combining step."""

    name: str
    tables: tuple[str, ...]
    partial: Callable[..., pl.LazyFrame]  # (table, LazyFrame, **params)
    combine: Callable[..., pl.DataFrame]  # ({table: partial results}, **params)

    @property
    def doc(self) -> str:
        """One line on what the query reports (``QUERY_DOCS``)."""
        return QUERY_DOCS[self.name]


# ----------------------------------------------------------------------------------- churn

_CHURN_KEYS: Final = (*POOL, "hour")


def _churn_partial(_: str, frames: pl.LazyFrame, every: str = "1h") -> pl.LazyFrame:
    return (
        frames.filter(pl.col("kind") == "DELTA")
        .with_columns(pl.col("recv_time").dt.truncate(every).alias("hour"))
        .group_by(_CHURN_KEYS)
        .agg(
            pl.len().cast(_U64).alias("deltas"),
            _sum("image_count", "images"),
            _sum("raw_len", "delta_bytes"),
        )
    )


def _churn_combine(parts: Mapping[str, pl.DataFrame], every: str = "1h") -> pl.DataFrame:
    return (
        parts["frames"]
        .group_by(_CHURN_KEYS)
        .agg(_sum("deltas"), _sum("images"), _sum("delta_bytes"))
        .sort(_CHURN_KEYS, nulls_last=True)
    )


# ------------------------------------------------------------------------------------ load

_SESSION: Final = ("capture", "stream_id")


def _load_partial(table: str, lf: pl.LazyFrame, every: str = "1m") -> pl.LazyFrame:
    keys = [*_SESSION, "frame_index", "recv_time", *POOL]
    if table == "snapshots":
        return lf.select(*keys, pl.col("occupied_slots").cast(pl.Int64), "bucket_count")
    # each applied delta's change in occupied slots
    return lf.group_by(keys).agg(
        (
            pl.col("occupied_after").cast(pl.Int64).sum()
            - pl.col("occupied_before").cast(pl.Int64).sum()
        ).alias("change")
    )


def _load_combine(parts: Mapping[str, pl.DataFrame], every: str = "1m") -> pl.DataFrame:
    snaps = parts["snapshots"].with_columns(pl.lit(0, pl.Int64).alias("change"))
    deltas = parts["images"].with_columns(
        pl.lit(None, pl.Int64).alias("occupied_slots"), pl.lit(None, _U64).alias("bucket_count")
    )
    events = (
        pl.concat([snaps.select(deltas.columns), deltas], how="vertical")
        .with_columns(pl.col("occupied_slots").is_not_null().alias("installs"))
        .sort([*_SESSION, "frame_index", "installs"], descending=[False, False, False, True])
        # a lane session: a snapshot installed and the deltas applied after it on its stream
        .with_columns(pl.col("installs").cum_sum().over(_SESSION).alias("_session"))
        .filter(pl.col("_session") > 0)
    )
    group = [*_SESSION, "_session"]
    held = events.with_columns(  # events are in frame order: the session's snapshot first
        (
            pl.col("occupied_slots").first().over(group) + pl.col("change").cum_sum().over(group)
        ).alias("occupied_slots"),
        pl.col("bucket_count").first().over(group),
    )
    binned = (
        held.drop_nulls("recv_time")
        .with_columns(pl.col("recv_time").dt.truncate(every).alias("time"))
        .sort([*POOL, "time", "recv_time", "capture", "stream_id", "frame_index"])
        .group_by([*POOL, "time"], maintain_order=True)
        .agg(pl.col("occupied_slots").last(), pl.col("bucket_count").last())
    )
    load = pl.col("occupied_slots") / (4 * pl.col("bucket_count"))
    return binned.with_columns(
        pl.col("occupied_slots").cast(_U64),
        load.alias("load_factor"),
        # ckf.estimated_false_positive_rate: 8α · 65538/2^32, about 8α/65534
        (8 * load * FINGERPRINT_MATCH_PROBABILITY).alias("estimated_fpr"),
    ).sort([*POOL, "time"])


# ------------------------------------------------------------------------------ violations

_RELAY: Final = ("relay_drt_instance_id", "relay_incarnation", "rule")


def _violations_partial(_: str, lf: pl.LazyFrame, **_params: Any) -> pl.LazyFrame:
    return lf.group_by(_RELAY).agg(
        pl.len().cast(_U64).alias("violations"),
        pl.col("recv_time").min().alias("first_time"),
        pl.col("recv_time").max().alias("last_time"),
    )


def _violations_combine(parts: Mapping[str, pl.DataFrame], **_params: Any) -> pl.DataFrame:
    return (
        parts["violations"]
        .group_by(_RELAY)
        .agg(_sum("violations"), pl.col("first_time").min(), pl.col("last_time").max())
        .sort(_RELAY, nulls_last=True)
    )


# ------------------------------------------------------------------------------- snapshots

_SNAPSHOT: Final = ("capture", "stream_id", "sequence", *POOL)


def _snapshots_partial(_: str, frames: pl.LazyFrame, **_params: Any) -> pl.LazyFrame:
    return (
        frames.filter(pl.col("kind") == "SNAPSHOT_CHUNK")
        .group_by(_SNAPSHOT)
        .agg(
            pl.len().cast(_U64).alias("chunks"),
            _sum("raw_len", "bytes"),
            _sum("word_count", "words"),
            pl.col("cbi1_bucket_count").max().alias("bucket_count"),
            pl.col("recv_time").min().alias("first_time"),
            pl.col("recv_time").max().alias("last_time"),
        )
    )


def _snapshots_combine(parts: Mapping[str, pl.DataFrame], **_params: Any) -> pl.DataFrame:
    return (
        parts["frames"]
        .group_by(_SNAPSHOT)
        .agg(
            _sum("chunks"),
            _sum("bytes"),
            _sum("words"),
            pl.col("bucket_count").max(),
            pl.col("first_time").min(),
            pl.col("last_time").max(),
        )
        .sort([*POOL, "first_time", "capture", "stream_id", "sequence"], nulls_last=True)
    )


#: the queries ``_menu.QUERY_DOCS`` names, one each (a test holds the two to the same names)
QUERIES: Final[dict[str, Query]] = {
    q.name: q
    for q in (
        Query("churn", ("frames",), _churn_partial, _churn_combine),
        Query("load", ("snapshots", "images"), _load_partial, _load_combine),
        Query("violations", ("violations",), _violations_partial, _violations_combine),
        Query("snapshots", ("frames",), _snapshots_partial, _snapshots_combine),
    )
}


# ---------------------------------------------------------------------------------- running


def _query(name: str) -> Query:
    try:
        return QUERIES[name]
    except KeyError:
        why = f"no fleet query {name!r} (queries: {', '.join(QUERIES)})"
        raise FleetError(FleetVariant.Query, why, field="name", actual=name) from None


def run_local(name: str, dataset: str | os.PathLike[str], **params: Any) -> pl.DataFrame:
    """The query in this process: its partial step over each whole table of
    :func:`cbi1kit.analysis.open_dataset`, then its combining step (``params``: the query's,
    such as ``every="1m"`` for churn's bins)."""
    q = _query(name)
    ds = open_dataset(dataset)
    got = {t: collect_table(q.partial(t, ds.tables[t], **params), t, ds.files(t)) for t in q.tables}
    return with_dc_names(q.combine(got, **params))


def _partitions(files: list[Path]) -> list[list[str]]:
    """A table's files, grouped by leaf partition directory."""
    by_dir: dict[Path, list[str]] = {}
    for f in files:
        by_dir.setdefault(f.parent, []).append(str(f))
    return list(by_dir.values())


def _partial_task(name: str, table: str, files: list[str], params: dict[str, Any]) -> pl.DataFrame:
    q = _query(name)
    return collect_table(q.partial(table, scan_table(table, files), **params), table, files)


def _combine_task(
    name: str, tables: tuple[str, ...], params: dict[str, Any], *parts: pl.DataFrame
) -> pl.DataFrame:
    return _query(name).combine(_split(tables, parts), **params)


def _split(tables: tuple[str, ...], parts: tuple[Any, ...]) -> dict[str, pl.DataFrame]:
    """``parts`` is, per table, its partition count then its partial results."""
    out: dict[str, pl.DataFrame] = {}
    i = 0
    for table in tables:
        n = int(parts[i])
        out[table] = pl.concat(list(parts[i + 1 : i + 1 + n]), how="vertical")
        i += 1 + n
    return out


def query_graph(name: str, dataset: str | os.PathLike[str], **params: Any) -> Any:
    """The query as one ``dask.delayed`` value: a task per partition of each table it reads,
    and a combining task."""
    from dask import delayed

    q = _query(name)
    ds = open_dataset(dataset)  # checks the dataset (and its schema version) here
    run = uuid.uuid4().hex[:8]
    args: list[Any] = []
    for table in q.tables:
        groups = _partitions(ds.files(table))
        empty = q.partial(table, scan_table(table, []), **params).collect()
        parts = [
            delayed(_partial_task, pure=True)(
                name, table, files, params, dask_key_name=f"{name}-{table}-{k}-{run}"
            )
            for k, files in enumerate(groups)
        ]
        args += [len(parts) + 1, empty, *parts]  # the empty result gives an empty table its columns
    return delayed(_combine_task, pure=True)(
        name, q.tables, params, *args, dask_key_name=f"{name}-combine-{run}"
    )


def run_query(
    name: str, dataset: str | os.PathLike[str], *, client: Client | None = None, **params: Any
) -> pl.DataFrame:
    """The query as a Dask computation on ``client`` (or a local cluster started for the
    call); equal to :func:`run_local`."""
    graph = query_graph(name, dataset, **params)
    with given_or_local(client) as dask_client:
        result: pl.DataFrame = dask_client.compute(graph).result()
    return with_dc_names(result)  # here: the names this process was told


def churn_per_pool_per_hour(
    dataset: str | os.PathLike[str], *, client: Client | None = None, every: str = "1h"
) -> pl.DataFrame:
    """Per pool (indexer domain digests, DC id) and UTC hour of receipt (``hour``: the bin's
    start; ``every`` another bin, such as ``"1m"`` for a short capture): ``deltas``, ``images``
    (images sent), ``delta_bytes`` (serialized ``FilterUpdate`` bytes), all ``UInt64``."""
    return run_query("churn", dataset, client=client, every=every)


def load_over_time(
    dataset: str | os.PathLike[str], *, client: Client | None = None, every: str = "1m"
) -> pl.DataFrame:
    """Per pool and minute (``time``; ``every`` another bin): the lane's occupied slots at the
    last replayed event of the bin (installed snapshot plus applied deltas), ``bucket_count``,
    ``load_factor`` α and ``estimated_fpr`` (8α · 65538/2^32, about 8α/65534)."""
    return run_query("load", dataset, client=client, every=every)


def violations_per_relay(
    dataset: str | os.PathLike[str], *, client: Client | None = None
) -> pl.DataFrame:
    """Replay's violations per relay (``relay_drt_instance_id``, ``relay_incarnation``; null
    where the violation has no frame) and rule: how many, first and last receive time."""
    return run_query("violations", dataset, client=client)


def snapshot_sizes(
    dataset: str | os.PathLike[str], *, client: Client | None = None
) -> pl.DataFrame:
    """Every snapshot sent (capture, stream, sequence, pool): ``chunks``, ``bytes``, ``words``
    (bucket words carried), ``bucket_count`` and its first and last chunk's receive time."""
    return run_query("snapshots", dataset, client=client)
