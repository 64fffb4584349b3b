"""How many single-row commits/s the lag benchmark's writers reach with no pipeline running.

The lag benchmarks ask for a commit rate and report the rate reached beside the latency;
this says what the host itself can give: the same writer processes (``bench.lag.Harness``)
commit single-row INSERTs at RATE asked, open loop, and delete their own cached keys (the
floor run of the lag benchmark), while no ``cachesync tail`` or ``consume`` runs. A rate
reached here below the one asked is the host's ceiling, not cachesync's.
``python -m bench --only commit_ceiling [--quick] [--runs N]``.
"""

from __future__ import annotations

from bench.common import Sandbox, log, median
from bench.lag import DDL, Harness

NAME = "commit_ceiling"
RATE = 10_000
SECONDS = {"full": 30.0, "quick": 10.0}


def run(stack, quick: bool, runs: int) -> dict:
    seconds = SECONDS["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    try:
        box.create_schema(DDL)
        harness = Harness(box, notified=True)
        try:
            results = []
            for i in range(runs):
                result = harness.measure_commits(RATE, seconds, True)
                results.append({k: result[k] for k in ("asked_rate", "achieved_rate", "writes",
                                                       "writers", "commit_p50_ms")})
                log(f"{NAME}: run {i + 1}/{runs}: {result['achieved_rate']}/s of {RATE}/s asked")
        finally:
            harness.close()
        return {"description": "single-row commits/s the lag writers reach with no pipeline "
                               "running (they delete their own keys)",
                "params": {"rate_per_s": RATE, "seconds": seconds, "runs": runs},
                "runs": results,
                "median_achieved_rate": median([r["achieved_rate"] for r in results])}
    finally:
        box.cleanup()
