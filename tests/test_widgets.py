"""The learning widgets: what they compute is checked against the codec and the filter; the live
wiring (a brush reaching Python, a slider moving the lane) by setting what the frontend sets."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cbi1kit as ck
from cbi1kit.data import sample_capture
from cbi1kit.viz import _widgets as W
from cbi1kit.viz._bytes import byte_explorer, byte_spans
from cbi1kit.viz._report import STATIC_ENV
from cbi1kit.wire import decode
from cbi1kit.wire._format import FilterFormat

ROOT = Path(__file__).parents[1]
SAMPLE = sample_capture()
VECTORS = ROOT / "tests" / "vectors" / "cbi1" / "frames" / "valid"


@pytest.fixture(scope="module")
def report() -> ck.ReplayReport:
    return ck.replay(SAMPLE)


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STATIC_ENV, raising=False)


@pytest.fixture
def static(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STATIC_ENV, "png")


def test_a_brush_lists_the_brushed_buckets_under_the_chart(
    report: ck.ReplayReport, live: None
) -> None:
    box = W.occupancy_explorer(report.final_lane)
    view, caption, _listing = box.children
    assert "buckets 0–31" in caption.value  # before any brush: the first buckets
    # what the frontend sends when the top strip is brushed over buckets 200..260
    view._vl_selections = {"range": {"value": {"bucket_start": [200.4, 260.9]}, "store": []}}
    assert "buckets 200–231" in caption.value
    table = W.listed_words(report.final_lane, {"bucket_start": [200.4, 260.9]})
    assert table["bucket"].to_list() == list(range(200, 232))
    lane = np.asarray(report.final_lane)
    assert table["word"].to_list() == [f"0x{int(w):016x}" for w in lane[200:232]]


def test_static_builds_get_a_picture(report: ck.ReplayReport, static: None) -> None:
    for shown in (
        W.occupancy_explorer(report.final_lane),
        W.stream_scrubber(SAMPLE, report=report),
        W.filter_playground(bucket_count=16, fill=20),
    ):
        assert hasattr(shown, "_ipython_display_") and shown.parts


def test_the_scrubber_shows_the_lane_at_each_sequence(report: ck.ReplayReport, live: None) -> None:
    box = W.stream_scrubber(SAMPLE, report=report)
    slider = box.children[0]
    assert slider.value == report.final_sequence
    images = ck.images_table(SAMPLE)
    for sequence in (report.sequence_ranges[0][0] + 5, report.final_sequence - 7):
        point = W.scrub_point(report, images, sequence)
        assert point.lane is not None
        assert np.array_equal(point.lane, report.lane_at(sequence))
        written = images.filter(images["sequence"] == sequence)
        assert point.last_delta["bucket"].to_list() == written["bucket"].to_list()
        slider.value = sequence  # the frontend moving the slider re-renders without error


def test_the_playground_publishes_what_it_wrote() -> None:
    pg = W.FilterPlayground(seed=0x5EED, bucket_count=16)
    fmt = FilterFormat(seed=0x5EED, bucket_count=16)
    kicked = failed = 0
    for _ in range(80):
        item = pg.random_item()
        step = pg.insert(item)
        if step.failed:  # a full filter: nothing written, the words as they were
            failed += 1
            assert step.frame is None and step.kicks == pg.max_kicks
            continue
        assert pg.table.contains(item)
        kicked += step.kicks > 0
        frame = decode(fmt, step.frame)
        assert [int(b) for b in frame.images["bucket"]] == step.buckets_written
        assert [int(w) for w in frame.images["word"]] == [
            pg.table.word(b) for b in step.buckets_written
        ]
        assert {step.bucket_a, step.bucket_b} & set(step.buckets_written) or step.kicks
    assert kicked and failed  # 64 slots: kick walks happen, then the filter fills up
    item = pg.items[0]
    step = pg.remove(item)
    assert not step.failed and len(step.buckets_written) == 1 and item not in pg.items


@settings(max_examples=50, deadline=None)
@given(name=st.sampled_from(sorted(p.name for p in VECTORS.glob("*.bin"))))
def test_byte_spans_tile_the_frame_and_name_every_byte(name: str) -> None:
    data = (VECTORS / name).read_bytes()
    spans = byte_spans(data)
    assert spans[0].start == 0 and spans[-1].end == len(data)
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))
    html = byte_explorer(data, shown=96)._repr_html_()
    assert html.count('data-offset="') == min(96, len(data))
    assert 'data-field="header.magic" data-offset="0"' in html
