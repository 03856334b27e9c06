"""A relay watched from a notebook: ``ck.live(target)`` records it in the background, follows the
recording with a :class:`~cbi1kit.analysis._watch.Watch`, and ``dashboard()`` redraws every lane
once or twice a second. See docs/watch.md.
"""

from __future__ import annotations

import atexit
import html
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cbi1kit.analysis._metrics import MetricsServer, WatchCollector
from cbi1kit.analysis._watch import LaneFigures, Watch, WatchState
from cbi1kit.ckf._limits import DEFAULT_MAX_AGE_S
from cbi1kit.errors import Cbi1kitError
from cbi1kit.hashing._dc_names import dc_text
from cbi1kit.relay._transport import ClientTls, names_a_relay, parse_listen
from cbi1kit.viz._display import interactive_charts

if TYPE_CHECKING:
    from cbi1kit.relay._recorder import BackgroundRecorder

#: the picker's value for every lane (a DC id is a u64: never negative)
EVERY_LANE = -1
_CELL = 'style="padding:0 8px; text-align:right"'


def _stripe_html(lane: LaneFigures) -> str:
    """One cell per stretch of the lane, darker as more of its four slots are full."""
    cells = "".join(
        f'<span style="display:inline-block;width:3px;height:12px;'
        f'background:hsl(210, 70%, {96 - 16 * min(v, 4.0):.0f}%)"></span>'
        for v in lane.stripe
    )
    return f'<span title="slots per bucket, left to right">{cells}</span>'


def state_html(state: WatchState, *, dc: int | None = None, status: str = "") -> str:
    """``state`` as an HTML table, a lane a row with its occupancy stripe (``dc``: that lane
    alone), the recent violations under it: what the dashboard shows at each redraw."""
    head = ("DC", "sequence", "load", "FPR≈", "images/s", "KB/s", "age", "", "occupancy")
    rows = []
    shared = state.shared_dcs
    for lane in state.lanes:
        if dc is not None and lane.dc_id != dc:
            continue
        seq = "-" if lane.sequence is None else str(lane.sequence)
        age = "-" if lane.age_s is None else f"{lane.age_s:.1f} s"
        mark = "STALE" if lane.stale else ("" if lane.ready else "not ready")
        bad = sum(lane.violations.values())
        mark += f" {bad} broken" if bad else ""
        rates = (f"{lane.images_per_s:,.0f}", f"{lane.bytes_per_s / 1e3:,.1f}")
        name = dc_text(lane.dc_id)
        if lane.dc_id in shared:  # a DC serving several models: its lanes by their models
            name += " · " + lane.which
        cells = [name, seq, f"{lane.load_factor:.3f}", f"{lane.fpr:.2e}"]
        cells += [*rates, age, mark]
        tds = "".join(f"<td {_CELL}>{html.escape(c)}</td>" for c in cells)
        rows.append(f"<tr>{tds}<td>{_stripe_html(lane)}</td></tr>")
    ths = "".join(f"<th {_CELL}>{h}</th>" for h in head)
    said = html.escape(f"{state.source}: {state.frames:,} frames {status}".strip())
    recent = "".join(f"<li>{html.escape(v.describe())}</li>" for v in state.recent[-5:])
    return (
        f"<div><b>{said}</b><table><tr>{ths}</tr>{''.join(rows)}</table>"
        f"{f'<ul>{recent}</ul>' if recent else ''}</div>"
    )


class Live:
    """A relay (``host:port``) recorded in the background into ``output`` (a scratch file when
    None), or a capture someone else is writing, followed every ``interval`` seconds. ``state``
    is the last look; ``metrics`` (``"127.0.0.1:9464"``) serves it to Prometheus. ``stop()``
    (and the interpreter's exit) ends the subscription and every thread."""

    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        output: str | os.PathLike[str] | None = None,
        tls: ClientTls | None = None,
        authority: str | None = None,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        interval: float = 0.5,
        metrics: str | None = None,
    ) -> None:
        self.target, self.interval = str(target), interval
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._error: str | None = None
        self._listeners: list[Any] = []
        self._recording: BackgroundRecorder | None = None
        self._poller: threading.Thread | None = None
        self.metrics: MetricsServer | None = None
        self.collector = WatchCollector()
        path = Path(target)
        if not isinstance(target, os.PathLike) and names_a_relay(self.target):
            from cbi1kit.relay._recorder import BackgroundRecorder  # grpc: the relay extra

            self._recording = BackgroundRecorder(
                output, "cbi1kit-live", target=self.target, tls=tls, authority=authority
            )
            path = self._recording.path
        self.watch = Watch(path, max_age_s=max_age_s, name=self.target)
        try:  # a metrics address that cannot be served: nothing is left running
            if metrics is not None:
                self.metrics = MetricsServer(self.collector, *parse_listen(metrics))
            self.state = self.watch.poll()
        except BaseException:
            self.stop()
            raise
        self._poller = threading.Thread(target=self._poll, name="cbi1kit-live", daemon=True)
        self._poller.start()
        atexit.register(self.stop)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.state = self.watch.poll()
            except (Cbi1kitError, OSError) as exc:  # the capture cannot be read on: say why
                self._error = f"cannot read on: {exc}"
            self.collector.update(self.state)
            if not self._paused.is_set() or self._error:
                for listener in list(self._listeners):
                    listener(self.state)
            if self._error:
                return

    @property
    def problem(self) -> str | None:
        """Why the figures stopped moving (None while they move): the follower could not read
        on, or the recording ended (the relay unreachable past the recorder's give-up time)."""
        report = None if self._recording is None else self._recording.report
        if self._error is None and report is not None and report.exit_code:
            return f"the recording ended: {report.stop_reason}"
        return self._error

    def _status(self, paused: bool = False) -> str:
        said = "stopped" if not self.running else ("paused" if paused else "")
        said = "; ".join(x for x in (said, self.problem) if x)
        return f"({said})" if said else ""

    @property
    def running(self) -> bool:
        """Until ``stop()``: the subscription and the follower go on."""
        return not self._stop.is_set()

    def pause(self) -> None:
        """Stop redrawing the dashboard (the recording and the figures go on)."""
        self._paused.set()

    def resume(self) -> None:
        """Redraw the dashboard again at every look."""
        self._paused.clear()

    def stop(self) -> None:
        """End the subscription, the follower, the metrics server; wait for every thread."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=10)
        if self._recording is not None:
            self._recording.stop("live stopped")
        if self.metrics is not None:
            self.metrics.close()
        self.watch.close()
        atexit.unregister(self.stop)
        for listener in list(self._listeners):  # the dashboard's last picture says so
            listener(self.state)

    def __repr__(self) -> str:
        said = "running" if self.running else "stopped"
        state = self.state
        return f"<Live {self.target}: {said}, {state.frames:,} frames, {len(state.lanes)} lane(s)>"

    def _repr_html_(self) -> str:
        return state_html(self.state, status=self._status())

    def dashboard(self) -> object:
        """Every lane redrawn at each look, a lane picker, pause and stop; without a live kernel
        the current state as a table."""
        if not interactive_charts():
            return self
        return _dashboard(self)


def _dashboard(live: Live) -> Any:
    import ipywidgets as w

    picker = w.Dropdown(options=[("every lane", EVERY_LANE)], value=EVERY_LANE, description="lane")
    pause = w.ToggleButton(description="pause", value=False)
    stop = w.Button(description="stop")
    board = w.HTML()

    def draw(state: WatchState) -> None:
        known = {value for _, value in picker.options}
        new = [(dc_text(lane.dc_id), lane.dc_id) for lane in state.lanes if lane.dc_id not in known]
        if new:
            picker.options = [*picker.options, *new]
        status = live._status(paused=pause.value)
        dc = None if picker.value == EVERY_LANE else picker.value
        board.value = state_html(state, dc=dc, status=status)

    def on_pause(change: dict[str, Any]) -> None:
        (live.pause if change["new"] else live.resume)()
        pause.description = "resume" if change["new"] else "pause"
        draw(live.state)

    def on_stop(_: Any) -> None:
        live.stop()
        draw(live.state)

    pause.observe(on_pause, ["value"])
    picker.observe(lambda _: draw(live.state), ["value"])
    stop.on_click(on_stop)
    live._listeners.append(draw)
    draw(live.state)
    return w.VBox([w.HBox([picker, pause, stop]), board])


#: ``ck.live(target, ...)``: a :class:`Live`, started
live = Live
