"""A smoke of the consistency lab on the real devstack (replica included): the "all" fault
class, every strategy, the real `cachesync tail` + `consume` (twice: one tailer reads the
replica's binlog, for `cachesync_tail_replica`); its figures are well formed,
the faults were injected and the lag window came from cachesync's probes."""

from __future__ import annotations

import json
import pathlib

import pytest

from bench.common import Stack
from bench.consistency import run
from bench.consistency.faults import CLASSES
from bench.consistency.strategies import STRATEGIES
from cachesync.devstack import default_env_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_the_lab_runs_every_strategy_under_every_fault_at_once(stack, tmp_path):
    every = next(f for f in CLASSES if f.name == "all")
    doc = run(Stack(default_env_file(ROOT)), quick=True, runs=3, classes=(every,),
              plot_to=tmp_path / "lab.png")
    json.dumps(doc)                                      # the bench writes it as JSON
    assert doc["params"]["runs"] == 1                    # --quick runs once
    cells = doc["median"]["all"]
    assert list(cells) == [s.name for s in STRATEGIES]
    for name, cell in cells.items():
        assert cell["reads"] > 0 and cell["writes"] > 0, name
        assert 0 <= cell["stale_reads"] <= cell["reads"], name
        assert cell["replica_lag_ms"]["max"] >= cell["replica_lag_ms"]["p50"] > 0, name
    injected = [r["injected"] for per in doc["runs"]["all"].values() for r in per]
    assert sum(i["outside_writes"] for i in injected) > 0
    assert doc["lag_window_ms"]["all"]["median"] > 0     # from the probes of this run
    assert set(doc["targets"]["all"]) == {s.name for s in STRATEGIES if s.cachesync}
    assert set(doc["targets"]["all"]["cachesync"]) >= {"stale_keys_zero", "stale_reads",
                                                        "best_other"}
    # the replica-tailing strategy ran through its own tailer, reading the replica's binlog
    assert doc["headline"]["all"] == "cachesync_tail_replica"
    through = doc["tail_replica_lag_ms"]["all"]
    assert through["max"] >= through["p50"] > 0           # its probes went through
    assert cells["cachesync_tail_replica"]["reads"] > 0
    assert (tmp_path / "lab.png").stat().st_size > 0
