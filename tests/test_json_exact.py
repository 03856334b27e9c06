"""No u64 through float (#42): every ``--json`` answer and every exported table holds each 64-bit
value exactly, for readers that hold JSON numbers as doubles (``jq``, JavaScript).

The captures are multi-DC, so DC ids, relay ids and timestamps all pass 2^53."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from cliutil import cli_run

import cbi1kit as ck
from cbi1kit._json import EXACT_INT, dumps
from cbi1kit.analysis._schema import HEX_TEXT
from cbi1kit.cli import build_parser
from cbi1kit.data import mooncake_trace

ROOT = Path(__file__).parents[1]
TRACE = mooncake_trace()
MODEL = "mooncake/conversation"


def inexact_numbers(text: str) -> list[str]:
    """Every number in JSON ``text`` a double would not hold exactly: an integer beyond 2^53,
    or a float as large (a 64-bit value that went through float)."""
    found: list[str] = []

    def as_int(s: str) -> int:
        if abs(int(s)) > EXACT_INT:
            found.append(s)
        return int(s)

    def as_float(s: str) -> float:
        if abs(float(s)) > EXACT_INT:
            found.append(s)
        return float(s)

    json.loads(text, parse_int=as_int, parse_float=as_float)
    return found


def json_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Every subcommand (``fleet query`` as one name) that takes ``--json``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from json_commands(sub, (*path, name))
        elif "--json" in action.option_strings:
            yield " ".join(path)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two 3-DC simulated captures (different router seeds) and a dataset of the first."""
    d = tmp_path_factory.mktemp("exact")
    a, b = d / "a.kvrcap", d / "b.kvrcap"
    for path, seed in ((a, "1"), (b, "2")):
        argv = ["simulate", str(TRACE), "-o", str(path), "--dcs", "3", "--limit", "300"]
        code, _, err = cli_run(*argv, "--seed", seed, "--no-progress")
        assert code == 0, err
    code, _, err = cli_run("export", str(a), "--dataset", "-o", str(d / "ds"), "--no-progress")
    assert code == 0, err
    code, _, err = cli_run("export", str(a), "-o", str(d / "tables"), "--no-progress")
    assert code == 0, err
    return {"a": a, "b": b, "ds": d / "ds", "tables": d / "tables"}


def answers(made: dict[str, Path]) -> dict[str, list[list[str]]]:
    """The argv of each ``--json`` command, run on the multi-DC captures."""
    a, b = str(made["a"]), str(made["b"])
    dc = f"{ck.open(made['a']).replay().lanes[0].pool.dc_id.value:016x}"
    queries = ("churn", "load", "violations", "snapshots")
    return {
        "simulate": [
            ["simulate", str(TRACE), "-o", str(made["a"].parent / "c.kvrcap"), "--limit", "5"]
        ],
        "replay": [["replay", a]],
        "stats": [["stats", a, "--dc", dc]],
        "view": [["view", a], ["view", a, "--model", MODEL]],
        "explain": [["explain", a, "--model", MODEL, "--trace", str(TRACE), "--request", "3"]],
        "diff": [["diff", a, b, "--dc", dc], ["diff", a, "--dc-a", dc, "--dc-b", dc]],
        "fleet query": [["fleet", "query", q, str(made["ds"]), "--local"] for q in queries],
        "watch": [["watch", a, "--duration", "0.2"]],
    }


def test_every_json_answer_holds_each_number_exactly(made: dict[str, Path]) -> None:
    runs = answers(made)
    assert set(runs) == set(json_commands(build_parser())), "a --json command is not scanned"
    for argvs in runs.values():
        for argv in argvs:
            code, out, err = cli_run(*argv, "--json")
            assert code in (0, 1), (argv, err)
            assert out.strip(), argv
            assert inexact_numbers(out) == [], argv


def test_the_dc_ids_of_a_fleet_query_read_as_replay_names_them(made: dict[str, Path]) -> None:
    code, out, _ = cli_run("fleet", "query", "snapshots", str(made["ds"]), "--local", "--json")
    assert code == 0
    shown = {row["dc_id"] for row in json.loads(out)["rows"]}
    named = {f"{lane.pool.dc_id.value:016x}" for lane in ck.open(made["a"]).replay().lanes}
    assert shown == named and len(named) == 3


def test_the_scan_sees_a_number_past_two_to_the_53() -> None:
    """The scanner can fail: a bare 64-bit id is found; the writer's own output is clean."""
    big = {"dc_id": 3843720873961286069, "nested": [{"t": 1735689765000000007}], "small": 7}
    assert inexact_numbers(json.dumps(big)) == ["3843720873961286069", "1735689765000000007"]
    assert inexact_numbers(json.dumps({"x": 3.8e18})) == ["3.8e+18"]
    assert inexact_numbers(dumps(big)) == []
    assert json.loads(dumps(big))["nested"][0]["t"] == "1735689765000000007"


def exported_tables(made: dict[str, Path]) -> Iterator[tuple[Path, pl.DataFrame]]:
    for root in (made["tables"], made["ds"]):
        for path in sorted(root.rglob("*.parquet")):
            yield path, pl.read_parquet(path, hive_partitioning=False)


def test_every_exported_table_keeps_64_bit_values_as_integers(made: dict[str, Path]) -> None:
    """Every id, seed and word column is ``UInt64``; no float column holds a value a double
    cannot (what a 64-bit value through float would leave)."""
    seen: set[str] = set()
    tables = list(exported_tables(made))
    assert len(tables) >= 6
    for path, frame in tables:
        for name, dtype in frame.schema.items():
            if name in HEX_TEXT:
                assert dtype == pl.UInt64, (path, name, dtype)
                seen.add(name)
            if dtype.is_float():
                peak: Any = frame[name].abs().max()
                assert peak is None or peak <= EXACT_INT, (path, name, peak)
    assert {"dc_id", "relay_drt_instance_id", "new_word"} <= seen
