"""Reading a ``kvrcap`` capture record by record, through the format's one scanner
(``cbi1kit.capture._scan.FileScan``; ``docs/capture-format.md``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from cbi1kit.capture._file import (
    RECORD_HEADER_LEN,
    STRUCTURAL,
    CaptureDamage,
    CaptureRecord,
    _ClosesOnExit,
)
from cbi1kit.capture._layout import RecordType
from cbi1kit.capture._scan import FileScan
from cbi1kit.errors import CaptureError


class CaptureReader(_ClosesOnExit):
    """A capture's records, read by the one scanner (``cbi1kit.capture._scan.FileScan``).

    ``items()`` yields intact records with each damaged stretch inline (:class:`CaptureDamage`);
    ``records()`` raises the first damage (``strict=False``: stops, ``resync=True``: reads past).
    INDEX and TRAILER only with ``structural=True``; ``verify=False`` skips body checksums.
    """

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = True) -> None:
        self.path = Path(path)
        self.verify = verify
        self.damage: CaptureError | None = None
        self.damages: list[CaptureDamage] = []
        self._scan = FileScan(self.path, verify=verify)  # OSError here if it cannot be read

    def close(self) -> None:
        """Close the file; safe to call twice."""
        self._scan.close()

    @property
    def created_unix_ns(self) -> int:
        """The file header's creation time (0 until read, or where it does not verify)."""
        return self._scan.created_unix_ns

    def _fresh(self) -> Any:
        self._scan.close()
        self._scan = FileScan(self.path, verify=self.verify)
        return self._scan

    def items(self, *, structural: bool = False) -> Iterator[CaptureRecord | CaptureDamage]:
        """Every intact record in order and every damaged stretch where it is (never raises
        for damage); the damage reports are also collected in ``damages``."""
        self.damage = None
        self.damages = []
        for item in self._fresh().scan():
            if isinstance(item, CaptureDamage):
                self.damages.append(item)
                if self.damage is None:
                    self.damage = item.error
                yield item
            else:
                yield from _stretch_records(item, structural)

    def records(
        self, *, strict: bool = True, resync: bool = False, structural: bool = False
    ) -> Iterator[CaptureRecord]:
        """Every intact record in order.

        Without ``resync`` reading ends at the first damage, which is raised (``strict``) or
        kept in ``damage``; with ``resync`` it goes on past every damage (all reports in
        ``damages``, the first in ``damage``) and never raises for damage.
        """
        for item in self.items(structural=structural):
            if isinstance(item, CaptureDamage):
                if resync:
                    continue
                if strict:
                    raise item.error
                return
            yield item

    def follow(
        self,
        *,
        poll_seconds: float = 0.05,
        idle_timeout: float | None = 5.0,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[CaptureRecord]:
        """Yield records as a writer appends them; an incomplete last record is waited for.

        Ends when ``stop()`` is true and nothing new arrived, or after ``idle_timeout`` seconds
        without new bytes; a record still incomplete then is a torn tail. Corruption is raised
        at once.
        """
        scan = self._fresh()
        idle_since = time.monotonic()
        while True:
            grew = False
            for item in scan.scan(final=False):
                grew = True
                yield from self._followed(item)
            if grew:
                idle_since = time.monotonic()
                continue
            if (stop is not None and stop()) or (
                idle_timeout is not None and time.monotonic() - idle_since >= idle_timeout
            ):
                for item in scan.scan(final=True):
                    grew = True
                    yield from self._followed(item)
                if not grew:
                    return
                continue
            time.sleep(poll_seconds)

    def _followed(self, item: Any) -> Iterator[CaptureRecord]:
        if isinstance(item, CaptureDamage):
            self.damage = item.error
            raise item.error
        yield from _stretch_records(item, False)


_TYPES: Final = {int(t): t for t in RecordType}


def _stretch_records(stretch: Any, structural: bool) -> Iterator[CaptureRecord]:
    """The records of a :class:`cbi1kit.capture._scan.Stretch`, bodies copied."""
    offsets, types, streams, lengths, numbers, walls, monos = (c.tolist() for c in stretch.cols)
    buf, base = stretch.buf, stretch.base
    for off, t, sid, n, number, wall, mono in zip(
        offsets, types, streams, lengths, numbers, walls, monos, strict=True
    ):
        kind = _TYPES[t]
        if kind in STRUCTURAL and not structural:
            continue
        at = off - base + RECORD_HEADER_LEN
        body = bytes(buf[at : at + n])
        yield CaptureRecord(number, off, kind, sid, wall, mono, off + RECORD_HEADER_LEN, body)
