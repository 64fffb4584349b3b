"""The monitoring picture's benchmark, quick, on the real devstack with a real Prometheus:
every query of the shipped dashboard is asked, the load shows in the series, and a PNG is drawn."""

from __future__ import annotations

import json
import pathlib

import pytest

from bench.common import Stack
from bench.dashboard import DASHBOARD, run
from cachesync.devstack import default_env_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_the_dashboard_queries_show_the_load(stack, tmp_path):
    picture = tmp_path / "dashboard.png"
    # half the quick run: the burst's 20,000 rows still dominate every 1-minute rate
    doc = run(Stack(default_env_file(ROOT)), quick=True, runs=1, picture=picture,
              size={"seconds": 30, "burst_at_s": 12})
    json.dumps(doc)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 50_000
    summary = doc["summary"]
    titles = [p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]]
    applied = summary[f"{titles[2]} / applied"]["max"]
    published = summary[f"{titles[2]} / published by tailers"]["max"]
    assert applied > 50 and published > 50        # the bulk UPDATE's rows, per second over 1 m
    assert summary[f"{titles[0]} / p50 heartbeat"]["max"] > 0
    assert summary[f"{titles[6]} / consistent"]["max"] > 0     # read_through fills checked
    assert f"{titles[6]} / stale" not in summary                 # and none found stale
