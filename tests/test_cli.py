"""The ``cbi1kit`` command line, run as a user runs it: a subprocess, exit codes, stderr."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from checkout import copy_tracked
from cliutil import one_line

from cbi1kit.data import FOLDER, mooncake_trace, sample_capture
from cbi1kit.hashing import dc_text

ROOT = Path(__file__).parents[1]
VECTORS = ROOT / "tests" / "vectors" / "cbi1" / "frames"
TRACE = mooncake_trace()
SMALL = ["--limit", "300", "--dcs", "2", "--workers", "2", "--capacity", "256", "--policy", "ckf"]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cbi1kit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_inspect_reports_problems_with_exit_1() -> None:
    out = run(
        "inspect",
        str(VECTORS / "invalid" / "checksum-flipped.bin"),
        "--seed",
        "0x5eed",
        "--buckets",
        "1024",
    )
    assert out.returncode == 1
    assert "Checksum at header.body_checksum (offset 44)" in out.stdout


def test_inspect_format_mismatch() -> None:
    out = run(
        "inspect", str(VECTORS / "valid" / "delta-empty.bin"), "--seed", "1", "--buckets", "1024"
    )
    assert out.returncode == 1
    assert "Format.Mismatch at header.seed (offset 12)" in out.stdout


def test_unreadable_input_is_one_line_exit_3(tmp_path: Path) -> None:
    out = run("inspect", str(tmp_path / "missing.bin"))
    assert out.returncode == 3
    assert out.stderr.strip().count("\n") == 0
    assert "cannot read" in out.stderr


@pytest.mark.parametrize("args", [["--seed", "1"], ["--seed", "1", "--buckets", "1000"]])
def test_bad_format_arguments_are_usage_errors(args: list[str]) -> None:
    out = run("inspect", str(VECTORS / "valid" / "delta-empty.bin"), *args)
    assert out.returncode == 2
    assert out.stderr.startswith("cbi1kit inspect: error:")


def test_layout_markdown_is_the_docs_table() -> None:
    out = run("layout", "--markdown")
    assert out.returncode == 0
    doc = (ROOT / "docs" / "wire-format.md").read_text()
    header_table = out.stdout.split("### header (both kinds)\n\n")[1].split("\n\n")[0]
    assert header_table in doc


def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    from cbi1kit.cli import main

    for sub in (
        "simulate",
        "inspect",
        "replay",
        "export",
        "stats",
        "view",
        "explain",
        "diff",
        "layout",
        "data",
        "demo",
        "lab",
        "report",
        "record",
        "serve",
    ):
        with pytest.raises(SystemExit) as done:
            main([sub, "--help"])
        assert done.value.code == 0 and "usage: cbi1kit" in capsys.readouterr().out


def test_version() -> None:
    from cbi1kit import __version__

    out = run("--version")
    assert (out.returncode, out.stdout.strip()) == (0, f"cbi1kit {__version__}")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from cbi1kit.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(_subparsers()))
def test_help_describes_the_command_and_shows_each_default(name: str) -> None:
    """Every subcommand has a description; each option with a default shows it, the
    simulation knobs theirs from the configuration (their own default is unset)."""
    from cbi1kit.sim._simrelay import SimRelayConfig

    parser = _subparsers()[name]
    assert parser.description, name
    shown = " ".join(parser.format_help().split())
    for action in parser._actions:
        default = action.default
        if action.option_strings and default not in (None, False, argparse.SUPPRESS):
            assert f"(default: {default})" in shown or "default" in (action.help or ""), action
    if name == "simulate":
        base = SimRelayConfig()
        assert f"(1..16) (default: {base.simulator.dcs})" in shown
        assert f"(1..4096) (default: {base.simulator.max_kicks})" in shown


def test_public_api_resolves() -> None:
    import cbi1kit

    for name in cbi1kit.__all__:
        assert hasattr(cbi1kit, name), name


# ---------------------------------------------------------------- simulate → replay → tables


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "small.kvrcap"
    res = run("simulate", str(TRACE), "-o", str(out), *SMALL, "--heartbeat-ms", "2000")
    assert res.returncode == 0, res.stderr
    assert "requests" in res.stdout and "false positives" in res.stdout
    return out


@pytest.fixture
def damaged(capture: Path, tmp_path: Path) -> Path:
    data = capture.read_bytes()
    path = tmp_path / "torn.kvrcap"
    path.write_bytes(data[: len(data) * 2 // 3])
    return path


def test_simulate_is_deterministic_and_refuses_to_overwrite(capture: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.kvrcap"
    res = run("simulate", str(TRACE), "-o", str(again), *SMALL, "--heartbeat-ms", "2000", "--json")
    assert res.returncode == 0, res.stderr
    assert again.read_bytes() == capture.read_bytes()
    assert json.loads(res.stdout)["capture_bytes"] == capture.stat().st_size
    res = run("simulate", str(TRACE), "-o", str(again), *SMALL)
    assert res.returncode == 2 and "--force" in res.stderr


def test_simulate_bad_inputs(tmp_path: Path) -> None:
    res = run("simulate", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "x.kvrcap"))
    assert res.returncode == 3 and res.stderr.count("\n") == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n{\n')
    res = run("simulate", str(bad), "-o", str(tmp_path / "y.kvrcap"))
    assert res.returncode == 1 and ":2" in res.stderr and res.stderr.count("\n") == 1
    res = run("simulate", str(TRACE), "-o", str(tmp_path / "z.kvrcap"), "--dcs", "17")
    assert res.returncode == 2 and res.stderr.startswith("cbi1kit simulate: error:")


def test_replay_ok_and_json(capture: Path) -> None:
    res = run("replay", str(capture))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "valid: no violations" in res.stdout
    res = run("replay", str(capture), "--json")
    report = json.loads(res.stdout)
    assert report["ok"] and report["counts"]["heartbeat"] > 0 and not report["violations"]


def test_inspect_capture(capture: Path) -> None:
    res = run("inspect", str(capture), "--rows", "3")
    assert res.returncode == 0, res.stderr
    for text in (
        "kvrcap capture",
        "created_unix_ns",
        "SubscribeKvPool",
        "SNAPSHOT_CHUNK",
        "delta.images[0]",
        "valid: no violations",
    ):
        assert text in res.stdout
    res = run("inspect", str(capture), "--frame", "0", "--head", "2")
    assert res.returncode == 0 and "snapshot.words[0]" in res.stdout
    res = run("inspect", str(capture), "--frame", "999999")
    assert res.returncode == 2


def test_stats_end_and_at_sequence(capture: Path) -> None:
    res = run("stats", str(capture), "--fpr-probes", "0")  # two DCs: which lane?
    assert res.returncode == 2 and "--dc" in res.stderr and res.stderr.count("\n") == 1
    dc = ["--dc", "sim-dc-1"]
    res = run("stats", str(capture), *dc, "--json", "--fpr-probes", "20000")
    assert res.returncode == 0, res.stderr
    end = json.loads(res.stdout)
    assert end["occupied_slots"] > 0 and end["measured_fpr"] is not None
    import cbi1kit as ck

    lane = ck.replay(capture).lane(dc="sim-dc-1")
    assert end["sequence"] == lane.final_sequence and end["dc_id"] == f"{lane.dc_id:016x}"
    res = run("stats", str(capture), "--dc", end["dc_id"], "--json", "--at", "1")
    early = json.loads(res.stdout)
    assert early["sequence"] == 1 and early["occupied_slots"] < end["occupied_slots"]
    res = run("stats", str(capture), *dc, "--at", str(10**9))
    assert res.returncode == 2 and "was not replayed" in res.stderr
    res = run("stats", str(capture), "--dc", "sim-dc-7", "--fpr-probes", "0")
    assert res.returncode == 2 and "no lane matches" in res.stderr


def test_replay_and_view_every_lane(capture: Path) -> None:
    """The capture holds both DCs: replay reports a lane each; view shows the consumer table
    at a time, as the library builds it, and refuses a model the catalog lacks."""
    import cbi1kit as ck

    replayed = json.loads(run("replay", str(capture), "--json").stdout)
    assert [lane["violations"] for lane in replayed["lanes"]] == [0, 0]
    assert replayed["final_sequence"] is None  # two lanes: see "lanes"
    text = run("replay", str(capture)).stdout
    assert "lanes: 2" in text and all(lane["dc_id"] in text for lane in replayed["lanes"])
    res = run("view", str(capture), "--model", "mooncake/conversation", "--at", "+40s", "--json")
    assert res.returncode == 0, res.stderr
    shown = json.loads(res.stdout)
    view = ck.global_view(capture, model="mooncake/conversation", at="+40s")
    ((lanes,),) = [[d["lanes"] for d in shown["domains"]]]
    assert [(n["sequence"], n["ready"], n["dc_id"]) for n in lanes] == [
        (n.sequence, n.ready, f"{n.pool.dc_id.value:016x}") for n in view.lanes
    ]
    assert shown["unix_ns"] == str(view.unix_ns) and shown["catalog_revisions"] == [1]  # > 2^53
    assert shown["domains"][0]["ready_lanes"] == view.table.ready_mask() == 0b11
    text = run("view", str(capture), "--at", "2025-01-01T00:00:30Z").stdout
    assert "ready 0x0003 of 0x0003" in text and "2025-01-01T00:00:30" in text
    res = run("view", str(capture), "--model", "no/such-model")
    assert res.returncode == 2 and "mooncake/conversation" in res.stderr
    res = run("view", str(capture), "--at", "noon")
    assert res.returncode == 2 and "--at" in res.stderr and res.stderr.count("\n") == 1


def test_stats_gives_the_measured_fpr_with_its_evidence(capture: Path) -> None:
    """A rate of a handful of hits means little without how many probes and how sure."""
    lane = ["--dc", "sim-dc-0"]  # the capture holds two DCs
    res = run("stats", str(capture), *lane, "--json", "--fpr-probes", "20000", "--probe-seed", "3")
    figures = json.loads(res.stdout)
    assert figures["fpr_probes"] == 20_000
    assert figures["measured_fpr"] == figures["false_positives"] / 20_000
    assert figures["measured_fpr_low"] <= figures["measured_fpr"] <= figures["measured_fpr_high"]
    assert figures["measured_fpr_interval"] == "95 % Wilson score interval"
    text = run("stats", str(capture), *lane, "--fpr-probes", "20000", "--probe-seed", "3").stdout
    row = text[text.index("measured_fpr") :].split("\n")  # the row, wrapped to the terminal
    line = " ".join([row[0], *(x.strip() for x in row[1:] if x.startswith(" "))])
    assert f"{figures['false_positives']} false positives in 20,000 distinct absent probes" in line
    assert f"{figures['measured_fpr_low']:.2e} to {figures['measured_fpr_high']:.2e}" in line


def test_export_parquet(capture: Path, tmp_path: Path) -> None:
    import polars as pl

    res = run("export", str(capture), "-o", str(tmp_path / "tables"))
    assert res.returncode == 0, res.stderr
    frames = pl.read_parquet(tmp_path / "tables" / "frames.parquet")
    replayed = json.loads(run("replay", str(capture), "--json").stdout)
    assert frames.height == replayed["frames"]


def test_damaged_capture_every_subcommand(damaged: Path, tmp_path: Path) -> None:
    res = run("replay", str(damaged))
    assert res.returncode == 1 and "SourceDamaged" in res.stdout
    res = run("inspect", str(damaged))
    assert res.returncode == 1 and "damage" in res.stdout
    res = run("stats", str(damaged), "--fpr-probes", "0", "--dc", "sim-dc-0")
    assert res.returncode == 1 and "violation" in res.stdout
    res = run("view", str(damaged))
    assert res.returncode == 1 and "violation" in res.stdout
    res = run("export", str(damaged), "-o", str(tmp_path / "t"))
    assert res.returncode == 1 and res.stderr.count("\n") == 1
    assert (tmp_path / "t" / "frames.parquet").exists()


@pytest.mark.parametrize("sub", ["replay", "stats", "export", "inspect", "view"])
def test_unreadable_sources_exit_3(sub: str, tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00garbage that is no capture")
    extra = ["-o", str(tmp_path / "o")] if sub == "export" else []
    for path in (tmp_path / "missing.kvrcap", junk):
        res = run(sub, str(path), *extra)
        if sub == "inspect" and path == junk:  # shown as a (broken) CBI1 frame, then refused
            assert "header.magic" in res.stdout
        assert res.returncode == 3, res.stderr
        assert res.stderr.count("\n") == 1


def test_demo_simulates_when_missing_then_reuses(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "mooncake").mkdir(parents=True)
    lines = TRACE.read_text().splitlines(keepends=True)[:150]
    (data / "mooncake" / "conversation_trace.jsonl").write_text("".join(lines))
    first = run("demo", "--data", str(data), "--no-report")
    assert first.returncode == 0, first.stderr
    assert "1. simulate:" in first.stdout and "valid: no violations" in first.stdout
    assert (data / "sample.kvrcap").exists()
    second = run("demo", "--data", str(data), "--no-report")
    assert second.returncode == 0 and "reusing" in second.stdout


def test_demo_on_a_file_that_is_no_capture_stops_before_the_notebooks(tmp_path: Path) -> None:
    """With the report on, the notebooks start in JupyterLab beside the replay; a capture that
    is not one is a one-line error (exit 3) before they do, and nothing is written."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "sample.kvrcap").write_bytes(b"not a capture at all, " * 8)
    out = run("demo", "--data", str(data), "--report", str(tmp_path / "reports"))
    assert out.returncode == 3, out.stderr
    assert out.stderr.count("\n") == 1 and "unrecognised input" in out.stderr
    assert not (tmp_path / "reports").exists()


def test_bundled_sample_is_valid_and_small() -> None:
    sample = sample_capture()
    assert sample.stat().st_size < 4 * 2**20
    res = run("replay", str(sample), "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["ok"]


def test_report_charts_only(tmp_path: Path) -> None:
    res = run("report", str(sample_capture()), "-o", str(tmp_path), "--no-notebooks")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "index.html").exists()
    assert "occupancy" in res.stdout


def test_report_of_a_capture_of_several_lanes_charts_the_dc_chosen(
    capture: Path, tmp_path: Path
) -> None:
    """Of two lanes, the report charts the one ``--dc`` names; without it, or with the
    notebooks (which chart a capture of one lane), it says so and writes nothing."""
    from cbi1kit.analysis import replay
    from cbi1kit.ckf import lane_stats

    lanes = replay(capture, keep_events=False).lanes
    assert len(lanes) == 2
    out = tmp_path / "report"
    res = run("report", str(capture), "-o", str(out), "--no-notebooks")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "(--dc, --model)" in res.stderr
    res = run("report", str(capture), "-o", str(out), "--dc", f"{lanes[1].dc_id:016x}")
    assert res.returncode == 1 and "notebooks chart a capture of one lane" in res.stderr
    assert not out.exists()
    for lane in lanes:
        dc = f"{lane.dc_id:016x}"
        res = run("report", str(capture), "-o", str(out / dc), "--no-notebooks", "--dc", dc)
        assert res.returncode == 0, res.stderr
        page = (out / dc / "index.html").read_text()
        final_lane = lane.final_lane
        assert final_lane is not None
        rows = dict(re.findall(r"<tr><th>([^<]*)</th><td>([^<]*)</td></tr>", page))
        assert rows["charted lane"] == f"DC {dc_text(lane.dc_id)}" and "(sim-dc-" in page
        assert rows["final sequence"] == str(lane.final_sequence)
        assert rows["load factor"] == f"{lane_stats(final_lane).load_factor:.4f}"


def test_report_on_a_missing_capture_is_exit_3(tmp_path: Path) -> None:
    res = run("report", str(tmp_path / "nope.kvrcap"), "-o", str(tmp_path / "out"))
    assert res.returncode == 3
    assert res.stderr.count("\n") == 1


def test_export_never_writes_over_existing_tables_without_force(
    capture: Path, tmp_path: Path
) -> None:
    out = tmp_path / "tables"
    assert run("export", str(capture), "-o", str(out)).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    res = run("export", str(capture), "-o", str(out))
    assert res.returncode == 2 and "use --force" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert run("export", str(capture), "-o", str(out), "--force").returncode == 0


def test_report_in_a_checkout_refuses_to_touch_its_notebooks(tmp_path: Path) -> None:
    """``cbi1kit report CAPTURE -o .`` run where ``notebooks/`` holds the sources."""
    copy_tracked(ROOT / "notebooks", tmp_path / "notebooks")
    before = {p.name: p.read_bytes() for p in (tmp_path / "notebooks").iterdir()}
    res = run("report", str(sample_capture()), "-o", ".", cwd=tmp_path)
    assert res.returncode == 2 and "notebooks" in res.stderr and "Traceback" not in res.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "notebooks").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notebooks"]


@pytest.mark.parametrize("content", [b"", b"  \n\t \n" * 20_000], ids=["empty", "whitespace"])
def test_an_empty_or_blank_file_is_no_valid_stream(content: bytes, tmp_path: Path) -> None:
    """It used to replay as "valid: no violations" with exit 0."""
    path = tmp_path / "blank.json"
    path.write_bytes(content)
    for command in ("replay", "stats", "export"):
        extra = ["-o", str(tmp_path / "out")] if command == "export" else []
        res = run(command, str(path), *extra)
        assert res.returncode == 3, (command, res.stdout, res.stderr)
        assert "empty input" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("at", [200_200, 20], ids=["record-body", "file-header"])
def test_the_cli_reads_on_past_damage_as_the_library_does(at: int, tmp_path: Path) -> None:
    """One flipped bit must not hide the rest of the capture from replay, stats or inspect:
    the damage is named with its record and offset, and every intact record after it is read."""
    import cbi1kit as ck

    data = bytearray((sample_capture()).read_bytes())
    data[at] ^= 0x10
    path = tmp_path / "flipped.kvrcap"
    path.write_bytes(bytes(data))
    library = ck.replay(path)
    assert library.frames > 5000
    replayed = json.loads(run("replay", str(path), "--json").stdout)
    assert replayed["frames"] == library.frames
    assert run("replay", str(path)).returncode == (0 if library.ok else 1)
    inspected = run("inspect", str(path))
    assert f"frames: {library.frames}" in inspected.stdout
    if at > 1000:  # a record body: named, at its record and offset
        assert "record body checksum mismatch" in " ".join(inspected.stdout.split())
        assert inspected.returncode == 1
    stats = run("stats", str(path), "--fpr-probes", "0")
    assert stats.returncode in (0, 1) and "Traceback" not in stats.stderr
    assert "sequence" in stats.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", str(TRACE), "-o", "{out}", "--seed", "-1"],
        ["simulate", str(TRACE), "-o", "{out}", "--epoch-unix-ns", "-1"],
        ["simulate", str(TRACE), "-o", "{out}", "--limit", "0"],
        ["simulate", str(TRACE), "-o", "{out}", "--layout-generation", "0"],
        ["simulate", str(TRACE), "-o", "{out}", "--expected-blocks", str(1 << 40)],
        ["simulate", str(TRACE), "-o", "{out}", "--dcs", "17"],
        ["simulate", str(TRACE), "-o", "{out}", "--overlap-weight", "nan"],
        ["stats", str(sample_capture()), "--probe-seed", "-1"],
        ["stats", str(sample_capture()), "--fpr-probes", "-1"],
        ["stats", str(sample_capture()), "--fpr-probes", "1000000000"],
        ["inspect", str(sample_capture()), "--rows", "-3"],
        ["serve", "--port", "70000"],
        ["serve", "--port", "-1"],
        ["serve", "--pace", "inf"],
        ["record", "127.0.0.1:1", "-o", "{out}", "--timeout", "0"],
    ],
    ids=lambda a: " ".join(a[0:1] + a[-2:]),
)
def test_every_number_is_range_checked_before_any_output(args: list[str], tmp_path: Path) -> None:
    """Out-of-range numbers are usage errors (exit 2) with one line, and nothing is created."""
    out = tmp_path / "out.kvrcap"
    res = run(*(a.replace("{out}", str(out)) for a in args))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr and not out.exists()


def test_serving_a_missing_trace_is_unreadable_input() -> None:
    res = run("serve", "--trace", "/nonexistent/trace.jsonl")
    assert res.returncode == 3 and "cannot read" in res.stderr


def test_inspect_picks_a_frame_without_holding_every_payload() -> None:
    sample = str(sample_capture())
    res = run("inspect", sample, "--frame", "3", "--rows", "2")
    assert res.returncode == 0 and "-- frame 3: annotated CBI1 payload (DELTA)" in res.stdout
    assert "more frames (--rows)" in res.stdout
    default = run("inspect", sample)
    assert "-- frame 1: annotated CBI1 payload (DELTA)" in default.stdout  # the first delta
    res = run("inspect", sample, "--frame", "99999")
    assert res.returncode == 2 and "outside 0..5582" in res.stderr


NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


def _as_nobody(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    quiet = ["--quiet"] if args[0] == "record" else [] if args[0] == "serve" else ["--no-progress"]
    return subprocess.run(
        [*NOBODY, sys.executable, "-m", "cbi1kit", *args, *quiet],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="drops to an unprivileged user: needs root and setpriv (CI runs as root)",
)
def test_permission_denied_as_a_user_is_one_line_and_exit_3() -> None:
    """As root nothing is denied, so this runs the CLI as ``nobody``: an unreadable input and an
    unwritable output folder are exit 3, one line naming the path, and nothing is written."""
    work = Path(tempfile.mkdtemp(prefix="cbi1kit-perm-"))  # pytest's tmp_path is root's only
    try:
        work.chmod(0o777)
        _permission_cases(work)
    finally:
        for p in work.rglob("*"):
            p.chmod(0o777)
        shutil.rmtree(work)


def _permission_cases(work: Path) -> None:
    ok = _as_nobody("replay", str(sample_capture()), cwd=work)
    assert ok.returncode == 0, ok.stderr  # nobody can run the CLI here and read the sample
    locked = work / "locked.kvrcap"
    shutil.copy(sample_capture(), locked)
    locked.chmod(0o000)
    trace = work / "locked.jsonl"
    trace.write_text("".join(TRACE.read_text().splitlines(keepends=True)[:20]))
    trace.chmod(0o000)
    readonly = work / "ro"
    readonly.mkdir()
    readonly.chmod(0o555)
    sample = str(sample_capture())
    cases = [
        (["replay", str(locked)], str(locked)),
        (["stats", str(locked)], str(locked)),
        (["inspect", str(locked)], str(locked)),
        (["export", sample, "-o", str(readonly / "tables")], str(readonly / "tables")),
        (["simulate", str(TRACE), "-o", str(readonly / "x.kvrcap"), "--limit", "20"], "ro"),
        (["report", sample, "-o", str(readonly / "rep"), "--no-notebooks"], "ro"),
        (["simulate", str(trace), "-o", str(work / "sim.kvrcap")], str(trace)),
        (
            ["report", sample, "-o", str(work / "rep"), "--trace", str(trace), "--no-notebooks"],
            str(trace),
        ),
        (["serve", "--trace", str(trace), "--duration", "0.2"], str(trace)),
        (["record", "127.0.0.1:1", "-o", str(readonly / "r.kvrcap"), "--timeout", "0.2"], "ro"),
    ]
    for argv, named in cases:
        res = _as_nobody(*argv, cwd=work)
        assert res.returncode == 3, (argv, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and named in res.stderr, res.stderr
    assert list(readonly.iterdir()) == []
    assert sorted(p.name for p in work.iterdir()) == ["locked.jsonl", "locked.kvrcap", "ro"]


def test_inspect_of_a_file_too_large_to_be_a_frame_reads_its_head_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import tracemalloc

    from cbi1kit.cli import main

    path = tmp_path / "big.cbi1"
    path.write_bytes((VECTORS / "valid" / "delta-empty.bin").read_bytes() + bytes(32 << 20))
    size = path.stat().st_size
    tracemalloc.start()
    try:
        code = main(["inspect", str(path)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out = capsys.readouterr().out
    assert code == 1 and f"CBI1 DELTA, {size} bytes" in out
    assert f"FrameTooLarge at offset {size}: {size} bytes" in out
    assert peak < 1 << 20  # the file is 32 MiB


@pytest.mark.parametrize("kind", ["missing", "a file"])
def test_lab_without_a_notebooks_folder_is_unreadable_input(kind: str, tmp_path: Path) -> None:
    folder = tmp_path / "notebooks"
    if kind == "a file":
        folder.write_text("")
    out = run("lab", "--notebooks", str(folder), "--no-browser")
    assert out.returncode == 3
    assert out.stderr.strip().startswith(f"cbi1kit lab: error: {folder}: no notebooks folder (")


@pytest.mark.parametrize("at", ["+90s", "2025-01-01T00:01:30Z"])
def test_stats_takes_a_time_as_view_does(at: str) -> None:
    """``stats --at`` takes what ``view``, ``explain`` and ``diff`` take: a sequence, an ISO
    time or an offset; a time gives the stats of the sequence the lane held then."""
    import cbi1kit as ck

    sample = str(sample_capture())
    held = ck.open(sample).view(at=at).lanes[0].sequence
    by_time = run("stats", sample, "--at", at, "--json", "--fpr-probes", "0")
    by_sequence = run("stats", sample, "--at", str(held), "--json", "--fpr-probes", "0")
    assert by_time.returncode == by_sequence.returncode == 0, by_time.stderr
    assert json.loads(by_time.stdout) == json.loads(by_sequence.stdout)
    assert json.loads(by_time.stdout)["sequence"] == held


@pytest.mark.parametrize("command", ["replay", "stats", "view", "export"])
def test_an_unreadable_input_is_named_once(command: str, tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(np.random.default_rng(3).integers(0, 256, 3000, dtype=np.uint8)))
    extra = ["-o", str(tmp_path / "out")] if command == "export" else []
    out = run(command, str(junk), *extra)
    assert out.returncode == 3
    assert out.stderr.count(str(junk)) == 1, out.stderr
    assert "record 0 at byte offset 0: unrecognised input" in out.stderr


def test_a_copy_of_the_checkout_leaves_out_what_lab_leaves_beside_it(tmp_path: Path) -> None:
    """``make lab`` writes ``notebooks/.ipynb_checkpoints/`` (git ignores it): the tests that
    copy the notebooks read every entry of the copy, and failed on that folder."""
    repo = tmp_path / "repo"
    (repo / ".ipynb_checkpoints").mkdir(parents=True)
    (repo / ".ipynb_checkpoints" / "01-checkpoint.ipynb").write_text("{}")
    (repo / ".gitignore").write_text(".ipynb_checkpoints/\n")
    (repo / "01.py").write_text("# %%\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    copy = copy_tracked(repo, tmp_path / "copy")
    assert sorted(p.name for p in copy.iterdir()) == [".gitignore", "01.py"]
    notebooks = copy_tracked(ROOT / "notebooks", tmp_path / "notebooks")
    assert all(p.is_file() for p in notebooks.iterdir()) and any(notebooks.glob("*.py"))


def test_bare_cbi1kit_prints_its_usage_and_commands() -> None:
    """``cbi1kit`` alone said only "the following arguments are required: COMMAND"."""
    res = run()
    assert res.returncode == 2, res
    assert res.stderr.startswith("usage: cbi1kit") and "replay" in res.stderr, res.stderr


def test_a_missing_notebooks_folder_is_unreadable_in_report_demo_and_lab(tmp_path: Path) -> None:
    """``report`` said exit 2 where ``demo`` and ``lab`` said 3 for the same missing folder."""
    missing = str(tmp_path / "notebooks")
    sample = str(sample_capture())
    out = str(tmp_path / "out")
    for argv in (
        ["report", sample, "-o", out, "--notebooks", missing, "--no-progress"],
        ["lab", "--notebooks", missing, "--no-browser"],
    ):
        res = run(*argv)
        assert res.returncode == 3 and "no notebooks folder" in res.stderr, (argv, res.stderr)
    res = run("demo", "--data", str(FOLDER), cwd=tmp_path)  # no notebooks/ here
    assert res.returncode == 3 and "no notebooks folder" in res.stderr, res.stderr
    assert not Path(out).exists()


@pytest.mark.parametrize("option", ["--at", "--at-a"])
def test_a_moment_that_starts_with_a_minus_reaches_the_moments_parser(option: str) -> None:
    """``--at -5s`` was refused by argparse ("expected one argument"), never saying what a
    moment may be."""
    command = "diff" if option == "--at-a" else "view"
    res = run(command, str(sample_capture()), option, "-5s", "--no-progress")
    assert res.returncode == 2 and one_line(res.stderr), res.stderr
    assert "'-5s' is neither a sequence" in res.stderr and "+90s" in res.stderr


def test_inspect_of_a_trace_says_what_replay_says() -> None:
    """A Mooncake trace (JSON lines) was hexdumped as a CBI1 frame, exit 1; ``replay`` says
    exit 3, not a FilterUpdate. Both now say so, and nothing is dumped."""
    trace = str(mooncake_trace())
    for command in ("inspect", "replay"):
        res = run(command, trace, "--no-progress")
        assert res.returncode == 3 and one_line(res.stderr), (command, res.stderr)
        assert "not a FilterUpdate" in res.stderr and res.stdout == "", (command, res.stdout)


def test_inspect_of_a_grpcurl_dump_names_who_reads_it(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    update = {"protocolVersion": 1, "kind": "FILTER_UPDATE_KIND_HEARTBEAT", "sequence": "0"}
    dump.write_text(json.dumps(update))
    assert run("replay", str(dump), "--no-progress").returncode in (0, 1)  # a dump replay reads
    res = run("inspect", str(dump))
    assert res.returncode == 2 and one_line(res.stderr) and "cbi1kit replay" in res.stderr


def test_data_lists_the_bundled_files_and_prints_one_path_for_a_shell() -> None:
    """``cbi1kit data``: every bundled file with its size; ``cbi1kit data NAME`` its path alone,
    which the other commands open (the README's ``replay "$(cbi1kit data sample)"``)."""
    from cbi1kit.data import FILES

    listed = run("data")
    assert listed.returncode == 0 and listed.stderr == ""
    for name, where in FILES.items():
        assert f"{where().stat().st_size:,}" in listed.stdout and name in listed.stdout
    path = run("data", "sample").stdout.strip()
    assert path == str(sample_capture())
    replayed = run("replay", path, "--no-progress")
    assert replayed.returncode == 0, replayed.stderr
    wrong = run("data", "nope")
    assert wrong.returncode == 2 and "invalid choice: 'nope'" in wrong.stderr


def test_a_value_not_known_is_a_dash_in_text_never_none() -> None:
    """An unnamed DC's name (None in ``--json``: null) is ``-`` in the text, not Python's None."""
    from cliutil import cli_run

    frames = FOLDER / "frames" / "snapshot-bc1024-chunk0.cbi1"
    code, out, err = cli_run("stats", str(frames), "--fpr-probes", "0")
    assert code == 0, err
    assert "None" not in out and re.search(r"^dc_name +-$", out, re.M), out
    code, out, err = cli_run("stats", str(frames), "--fpr-probes", "0", "--json")
    assert code == 0 and json.loads(out)["dc_name"] is None, err


def test_stats_at_a_moment_the_lane_was_not_ready_says_why() -> None:
    """Past the sample's end (58 min 51 s) its stream had closed: the answer says so, as
    ``view`` and ``diff`` do, not only that the lane was not ready."""
    from cliutil import cli_run

    code, out, err = cli_run("stats", str(sample_capture()), "--at", "+59m", "--no-progress")
    assert code == 2 and out == "" and one_line(err), err
    assert "the lane was not ready: stream 4 closed (OK: end of simulation)" in err, err
