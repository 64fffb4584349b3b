"""The soak's pure parts: RSS growth over the sustained load, and the processes it samples."""

from __future__ import annotations

import subprocess

import pytest

from bench import soak
from bench.threads import descendants
from tests.support import wait_for


def test_growth_is_from_the_settled_first_minute_to_the_last_one():
    # one sample every SAMPLE_S: 0-60 s settling (ignored), then 100 MB rising to 104 MB
    series = [(t, 500.0 if t < soak.SETTLE_S else 100.0 + 4.0 * (t - 60) / 540)
              for t in range(0, 605, int(soak.SAMPLE_S))]
    growth = soak._growth(series, 0.0, 600.0)
    # medians of the first and the last minute's 12 samples (60-115 s, 545-600 s)
    assert growth["from_mb"] == 100.2 and growth["to_mb"] == 103.8
    assert growth["growth"] == pytest.approx(3.6 / 100.2, abs=1e-3)
    assert soak._growth(series[:13], 0.0, 60.0)["growth"] is None    # shorter than settling


def test_a_process_tree_is_sampled_with_its_children():
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        wait_for(lambda: len(descendants(shell.pid)) == 2, 10, what="two children")
        assert all(soak._status(pid)["VmRSS"] > 0 for pid in descendants(shell.pid))
    finally:
        for pid in descendants(shell.pid):
            subprocess.run(["kill", str(pid)], check=False)
        shell.wait(10)
    assert soak._status(shell.pid) == {}                # gone: nothing, not an error
