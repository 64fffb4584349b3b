"""Malformed binlog bytes: mutants of the binlog files real servers wrote (the shared
folder's ``realbinlog/``, sources in its SOURCES.md), each streamed from a replay primary to
the tailer's change source on both readers and both row paths (compiled, and
``CACHESYNC_NO_SPEEDUPS=1``), in worker subprocesses that the test times out.

Each mutant overwrites 1-4 bytes inside one TABLE_MAP or rows event and recomputes the
event's CRC32, so the bytes reach the decoders. Whatever the bytes say, the change source
ends in one of: rows decoded (right or wrong: the checksum vouches for them), a table-level
invalidation of the table whose rows event could not be decoded or read (WARNING and
metric), or one of cachesync's named errors (a table map the library cannot read stops the
tailer with a FatalError naming the position). Never a hang, a signal or an unnamed
exception.

Reproduce the counts: ``CACHESYNC_SHARED=/work/shared .venv/bin/pytest -p no:cacheprovider
tests/unit/test_binlog_fuzz.py -s`` (they are printed per path).
"""

from __future__ import annotations

import collections
import sys

import pytest

from tests.support import binlogfuzz
from tests.support.shared import shared_dir, shared_file

SEED = 43
MUTANTS = 400
TIMEOUT_S = 30.0        # per run: generous on a loaded machine; a hang never ends
PATHS = {"compiled": {"CACHESYNC_NO_SPEEDUPS": ""}, "python": {"CACHESYNC_NO_SPEEDUPS": "1"}}
ENDINGS = ("decoded", "invalidated", "named")


def _files() -> dict[str, str]:
    folder = shared_dir() / "realbinlog"
    return {p.name: str(shared_file("realbinlog", p.name))
            for p in sorted(folder.iterdir()) if p.name != "SOURCES.md"}


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    import pathlib
    paths = _files()
    files = {name: binlogfuzz.read_file(pathlib.Path(path)) for name, path in paths.items()}
    return [{"file": m.file, "path": paths[m.file], "number": m.number, "edits": m.edits,
             "reader": reader}
            for m in binlogfuzz.mutants(files, SEED, MUTANTS) for reader in binlogfuzz.READERS]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_malformed_bytes_end_in_rows_table_invalidation_or_named_error(runs, path):
    results = binlogfuzz.run_all(runs, PATHS[path], TIMEOUT_S)
    counts = collections.Counter((r["reader"], r["outcome"]) for r in results)
    print(f"\n{path} path, {MUTANTS} mutants (seed {SEED}), per reader:", file=sys.stderr)
    for reader in binlogfuzz.READERS:
        print(f"  {reader}: " + ", ".join(f"{k} {counts[(reader, k)]}" for k in
                                          (*ENDINGS, "hang", "signal", "unnamed")),
              file=sys.stderr)
    bad = [r for r in results if r["outcome"] not in ENDINGS]
    assert not bad, "\n".join(
        f"mutant {r['number']} of {r['file']} ({r['reader']} reader, edits {r['edits']}): "
        f"{r['outcome']} {r.get('error', '')} {r.get('where', '')}" for r in bad[:5])
