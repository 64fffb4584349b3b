"""Binlog event checksums: what verifying each event's CRC32 costs the tailer.

CPU only (no server). The events of the shared folder's real binlog files that carry CRC32
checksums (``$CACHESYNC_SHARED/realbinlog``, by default the checkout's ``../shared``) are
verified, each as the packet a reader gets (OK byte, event, CRC32):

* python_ns_per_event: ``checksums.verify``, what both readers run per event
  (``framing.FramedConnection.next_raw``), against a loop that does nothing with them;
* compiled_mb_s / zlib_mb_s: the compiled CRC32 that ``scan_group`` and ``plain_run`` check
  whole transactions with (``_speedups.crc32``), and zlib's, over the same bytes.

The tailer benchmark's end-to-end figures move by more than this from run to run on a shared
host; this one isolates the cost. Runs are medians; the host may be shared.
"""

from __future__ import annotations

import gzip
import struct
import time
import zlib

from bench.common import log, ratio, shared_file, summarize
from cachesync.producer_outbox.binlog.checksums import verify

NAME = "checksums"
ROUNDS = {"full": 4000, "quick": 400}
_HEADER = 19


def packets() -> list[bytes]:
    """Every event, as a packet, of the shared real binlogs written with CRC32 checksums."""
    folder = shared_file("realbinlog", "SOURCES.md").parent
    out = []
    for path in sorted(folder.iterdir()):
        if path.name == "SOURCES.md":
            continue
        data = path.read_bytes()
        data = gzip.decompress(data) if path.name.endswith(".gz") else data
        events, at = [], 4
        while at + _HEADER <= len(data):
            size = struct.unpack_from("<I", data, at + 9)[0]
            events.append(data[at:at + size])
            at += max(size, _HEADER)
        if events and _crc_ok(events[1:]):
            out.extend(b"\x00" + e for e in events)
    return out


def _crc_ok(events: list[bytes]) -> bool:
    return bool(events) and all(zlib.crc32(e[:-4]) == struct.unpack("<I", e[-4:])[0]
                                for e in events)


def _per_event_ns(each, items: list[bytes], rounds: int) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        for p in items:
            each(p)
    return (time.perf_counter() - t0) / rounds / len(items) * 1e9


def _mb_s(crc, data: bytes, rounds: int) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        crc(data)
    return len(data) * rounds / (time.perf_counter() - t0) / 1e6


def run(stack, quick: bool, runs: int) -> dict:
    from cachesync import _speedups
    items = packets()
    rounds = ROUNDS["quick" if quick else "full"]
    joined = b"".join(items)
    results = []
    for i in range(runs):
        idle = _per_event_ns(lambda p: None, items, rounds)
        results.append({
            "python_ns_per_event": round(_per_event_ns(verify, items, rounds) - idle),
            "compiled_mb_s": round(_mb_s(_speedups.crc32, joined, rounds)),
            "zlib_mb_s": round(_mb_s(zlib.crc32, joined, rounds))})
        log(f"checksums run {i + 1}/{runs}: {results[-1]}")
    out = summarize(results, ["python_ns_per_event", "compiled_mb_s", "zlib_mb_s"])
    med = out["median"]
    out.update(events=len(items), bytes=len(joined),
               median_event_bytes=sorted(map(len, items))[len(items) // 2],
               compiled_vs_zlib=ratio(med["compiled_mb_s"], med["zlib_mb_s"]))
    return out
