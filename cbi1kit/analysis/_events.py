"""Replay's events as columns: a row per message, an event object only when one is asked for
(``report.events[i]``). The fast engine appends a run of rows at a time."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, overload

import numpy as np
import numpy.typing as npt

from cbi1kit.wire._rules import action_of

if TYPE_CHECKING:
    import polars as pl


class EventKind(enum.StrEnum):
    """What a replay event did to its lane (the ``kind`` column)."""

    SNAPSHOT_CHUNK = "snapshot_chunk"  # a chunk absorbed, snapshot not complete yet
    SNAPSHOT_INSTALLED = "snapshot_installed"  # the last chunk: the lane is ready at sequence
    DELTA_APPLIED = "delta_applied"
    HEARTBEAT = "heartbeat"
    SKIPPED = "skipped"  # after a violation, until the next snapshot starts
    VIOLATION = "violation"


KIND_CODES: Final = {kind: code for code, kind in enumerate(EventKind)}
_KINDS: Final = list(EventKind)


@dataclass(frozen=True, slots=True)
class ReplayEvent:
    """What replay did with one frame (``frame_index`` counts the source's frames from 0)."""

    frame_index: int
    kind: EventKind
    sequence: int | None
    reason: str | None = None
    base_sequence: int | None = None
    stream_id: int = 0
    source_offset: int | None = None


@dataclass(frozen=True, slots=True)
class Violation(ReplayEvent):
    """A broken rule. ``rule`` names it (upstream's variant where there is one); ``action`` is
    what a consumer does about it (``invalidate-lane``, ``quarantine-pool``, or ``none`` for
    damage to the recording)."""

    rule: str = ""

    @property
    def action(self) -> str:
        """What a consumer does: ``invalidate-lane``, ``quarantine-pool`` (the rulebook's), or
        ``none`` (``SourceDamaged``: the recording's damage, no message a consumer saw)."""
        return action_of(self.rule)

    def describe(self) -> str:
        """The violation on one line, as every report lists it: where, which rule, why."""
        seq = "" if self.sequence is None else f" sequence {self.sequence}"
        return (
            f"frame {self.frame_index} (stream {self.stream_id}){seq}: {self.rule}: {self.reason}"
        )

    def to_dict(self) -> dict[str, object]:
        """The violation as JSON-ready data: where, which rule, why, and the consumer's action."""
        return {
            "frame_index": self.frame_index,
            "stream_id": self.stream_id,
            "sequence": self.sequence,
            "rule": self.rule,
            "reason": self.reason,
            "action": self.action,
        }


def never_installed(violations: Sequence[Violation]) -> str:
    """Why a lane has nothing to show: no snapshot was ever installed, and the first of the
    ``violations`` that kept one out (a wrong format, damage, a foreign file), if any."""
    if not violations:
        return "no snapshot was ever installed"
    first = violations[0].describe()
    return f"no snapshot was ever installed (first of {len(violations)} violation(s): {first})"


#: the columns: record index, kind code, sequence, base sequence, stream, offset, reason (0:
#: none, else 1 + its index), violation (-1: none, else its index), and which values are there
_DTYPE: Final = np.dtype(
    [
        ("index", "<u8"),
        ("kind", "u1"),
        ("sequence", "<u8"),
        ("base", "<u8"),
        ("stream", "<u4"),
        ("offset", "<u8"),
        ("reason", "<u4"),
        ("violation", "<i4"),
        ("has", "u1"),  # bit 0: sequence, 1: base, 2: offset
    ]
)


class EventLog(Sequence[ReplayEvent]):
    """Every event in order, as rows of ``_DTYPE``; reasons and violations kept once each."""

    def __init__(self) -> None:
        self._parts: list[npt.NDArray[np.void]] = []
        self._rows: list[tuple[int, ...]] = []  # one at a time, until the next bulk append
        self.reasons: list[str] = []
        self._reason_at: dict[str, int] = {}
        self.violations: list[Violation] = []
        self._n = 0

    def reason(self, text: str | None) -> int:
        """The code of a reason (0: none)."""
        if text is None:
            return 0
        code = self._reason_at.get(text)
        if code is None:
            self.reasons.append(text)
            code = self._reason_at[text] = len(self.reasons)
        return code

    def append(self, event: ReplayEvent) -> None:
        """Add one event to the columns (a violation also to ``violations``)."""
        vio = -1
        if isinstance(event, Violation):
            vio = len(self.violations)
            self.violations.append(event)
        has = (event.sequence is not None) | (event.base_sequence is not None) << 1
        has |= (event.source_offset is not None) << 2
        self._rows.append(
            (
                event.frame_index,
                KIND_CODES[event.kind],
                event.sequence or 0,
                event.base_sequence or 0,
                event.stream_id & 0xFFFFFFFF,
                event.source_offset or 0,
                self.reason(event.reason),
                vio,
                has,
            )
        )
        self._n += 1

    def extend(self, rows: npt.NDArray[np.void]) -> None:
        """Rows of ``_DTYPE`` made by the caller (no violations among them)."""
        self._flush()
        self._parts.append(rows)
        self._n += len(rows)

    @staticmethod
    def rows(n: int) -> npt.NDArray[np.void]:
        """``n`` empty rows to fill for :meth:`extend` (no violation among them)."""
        rows = np.zeros(n, dtype=_DTYPE)
        rows["violation"] = -1
        return rows

    def _flush(self) -> None:
        if self._rows:
            self._parts.append(np.array(self._rows, dtype=_DTYPE))
            self._rows.clear()

    def table(self) -> npt.NDArray[np.void]:
        """Every row, in order."""
        self._flush()
        if len(self._parts) != 1:
            self._parts = [np.concatenate(self._parts) if self._parts else np.zeros(0, _DTYPE)]
        return self._parts[0]

    def __len__(self) -> int:
        return self._n

    def frozen(self) -> EventLog:
        """The events so far, as they stand: appending here goes on without it."""
        self._flush()
        copy = EventLog()
        copy._parts = list(self._parts)  # the parts themselves: never written again
        copy.reasons = list(self.reasons)
        copy._reason_at = dict(self._reason_at)
        copy.violations = list(self.violations)
        copy._n = self._n
        return copy

    def _event(self, row: np.void) -> ReplayEvent:
        if row["violation"] >= 0:
            return self.violations[int(row["violation"])]
        has = int(row["has"])
        reason = int(row["reason"])
        return ReplayEvent(
            int(row["index"]),
            _KINDS[int(row["kind"])],
            int(row["sequence"]) if has & 1 else None,
            self.reasons[reason - 1] if reason else None,
            int(row["base"]) if has & 2 else None,
            int(row["stream"]),
            int(row["offset"]) if has & 4 else None,
        )

    @overload
    def __getitem__(self, i: int) -> ReplayEvent: ...
    @overload
    def __getitem__(self, i: slice) -> list[ReplayEvent]: ...
    def __getitem__(self, i: int | slice) -> ReplayEvent | list[ReplayEvent]:
        t = self.table()
        if isinstance(i, slice):
            return [self._event(r) for r in t[i]]
        return self._event(t[i])

    def __iter__(self) -> Iterator[ReplayEvent]:
        t = self.table()
        for k in range(len(t)):
            yield self._event(t[k])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return NotImplemented if not isinstance(other, Sequence) else False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{len(self)} replay events>"

    def to_frame(self) -> pl.DataFrame:
        """The events as a table: index, kind, sequence, base, stream, offset, reason."""
        import polars as pl

        t = self.table()
        has = t["has"]
        reasons = pl.Series([None, *self.reasons], dtype=pl.Categorical)
        return pl.DataFrame(
            {
                "frame_index": t["index"],
                "kind": pl.Series([k.value for k in _KINDS], dtype=pl.Categorical).gather(
                    t["kind"].astype(np.uint32)
                ),
                "sequence": pl.Series(t["sequence"]).set(pl.Series((has & 1) == 0), None),
                "base_sequence": pl.Series(t["base"]).set(pl.Series((has & 2) == 0), None),
                "stream_id": t["stream"],
                "source_offset": pl.Series(t["offset"]).set(pl.Series((has & 4) == 0), None),
                "reason": reasons.gather(t["reason"]),
            }
        )
