"""`cachesync demo` on the devstack, both ways: through Kafka (`tail` + `consume`) and with
`--direct` (one `run --direct` process, no Kafka); every write's keys are invalidated and the
summary line reports the lag."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cachesync.devstack import default_env_file
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

SUMMARY = re.compile(r"^8 writes: commit->invalidation lag p50 [0-9.]+ ms", re.M)


@pytest.mark.parametrize("args, started", [((), "starting tailer and consumer"),
                                           (("--direct",), "starting run --direct (no Kafka)")])
def test_demo_invalidates_every_write(stack, args, started):
    done = subprocess.run([sys.executable, "-m", "cachesync", "demo", "--writes", "8",
                           "--env-file", str(default_env_file(ROOT)), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, **stack.env})
    assert done.returncode == 0, done.stdout + done.stderr
    assert started in done.stdout
    assert len(re.findall(r"^lag +[0-9.]+ ms +\S", done.stdout, re.M)) == 8, done.stdout
    assert SUMMARY.search(done.stdout), done.stdout
