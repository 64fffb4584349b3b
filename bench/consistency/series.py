"""A cell's per-change series, for finding where a late invalidation's time went.

``BENCH_NINES_SERIES=<dir>`` makes every cachesync cell of ``consistency_nines`` write
``<dir>/<class>-<strategy>.json``: per change, in commit order, the times (seconds of the
cell's ``time.perf_counter()``, 0 = the first commit) at which

* ``sent``: the writer sent COMMIT (the lab's commit time),
* ``returned``: COMMIT returned to the writer,
* ``heard``: the keyspace watcher heard the writer set the change's marker (just before
  ``sent``: how late the watcher itself hears, at that moment),
* ``applied``: the watcher heard cachesync unlink the marker (the lab's apply time);

and the per-second CPU and run-queue time of each process of the lab (``CpuSample``); in the
kill class, each outage's kind, start and end on the same clock.
"""

from __future__ import annotations

import json
from pathlib import Path

NEVER = float("inf")


def write(path: Path, raw: dict) -> None:
    """The cell's series (see the module) as JSON."""
    changes = sorted(raw["changes"], key=lambda c: c[3])
    t0 = changes[0][3] if changes else 0.0

    def rel(t):
        return None if t is None or t == NEVER else round(t - t0, 4)
    rows = [{"row": row, "seq": seq, "sent": rel(sent), "returned": rel(rest[1]),
             "heard": rel(raw["marker_set"].get((row, seq))),
             "applied": rel(raw["gone"].get((row, seq)))}
            for row, seq, _, sent, *rest in changes]
    cpu = [{**s, "t": rel(s["t"])} for s in raw["cpu_timeline"]]
    path.parent.mkdir(parents=True, exist_ok=True)
    outages = [{"what": what, "start": rel(start), "end": rel(end)}
               for what, start, end in raw.get("outages", [])]
    path.write_text(json.dumps({"changes": rows, "cpu": cpu, "loadavg": raw["loadavg"],
                                "outages": outages}))


LATE_S = 1.0               # the headline's bound
BURST_GAP_S = 1.0          # late changes committed closer than this are one burst


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def bursts(rows: list[dict]) -> list[dict]:
    """The late changes (applied more than LATE_S after ``sent``) grouped by commit time:
    each burst's first and last commit, its count and worst lag, and where the worst
    change's time went."""
    late = [r for r in rows if r["applied"] is not None and r["applied"] - r["sent"] > LATE_S]
    out: list[dict] = []
    for r in late:
        if out and r["sent"] - out[-1]["last"] <= BURST_GAP_S:
            b = out[-1]
            b["last"], b["late"] = r["sent"], b["late"] + 1
        else:
            b = {"first": r["sent"], "last": r["sent"], "late": 1, "worst": None}
            out.append(b)
        if b["worst"] is None or r["applied"] - r["sent"] > b["worst"]["lag"]:
            b["worst"] = stages(r)
    return out


def stages(r: dict) -> dict:
    """One change's lag with the lab's own share of it: the COMMIT round trip, and how late
    the watcher heard the marker set."""
    def d(a, b):
        return None if r[a] is None or r[b] is None else round(r[b] - r[a], 3)
    return {"sent": r["sent"], "lag": round(r["applied"] - r["sent"], 3),
            "commit_rtt": d("sent", "returned"), "watcher_late": d("sent", "heard")}


def summary(doc: dict) -> dict:
    """The figures the series shows: lags from COMMIT sent and returned, the stages'
    percentiles, the bursts of late changes."""
    rows = [r for r in doc["changes"] if r["applied"] is not None]
    split = [stages(r) for r in rows]
    out = {"changes": len(doc["changes"]), "applied": len(rows)}
    for name in ("lag", "commit_rtt", "watcher_late"):
        vals = [s[name] for s in split if s[name] is not None]
        out[name] = {"p50": _pct(vals, 0.5), "p99": _pct(vals, 0.99),
                     "p99.9": _pct(vals, 0.999), "max": max(vals) if vals else None,
                     "over_1s": sum(1 for v in vals if v > LATE_S)}
    from_returned = [r["applied"] - r["returned"] for r in rows]
    out["within_1s_from_sent"] = 1 - out["lag"]["over_1s"] / max(1, len(doc["changes"]))
    out["within_1s_from_returned"] = (sum(1 for v in from_returned if v <= LATE_S)
                                      / max(1, len(doc["changes"])))
    out["bursts"] = bursts(rows)
    out["outages"] = [recovery(o, rows) for o in doc.get("outages", [])]
    return out


def recovery(outage: dict, rows: list[dict]) -> dict:
    """What followed one outage's end: when the first and the last change it delayed
    (committed from LATE_S before its start until its end) were applied, and how many of
    them landed by its end + LATE_S (the kill class's deadline), in seconds after its end."""
    end = outage["end"]
    delayed = [r["applied"] for r in rows if outage["start"] - LATE_S <= r["sent"] <= end]
    after = [a for a in delayed if a > end]
    return {**outage, "delayed": len(delayed),
            "landed_by_end_plus_1s": sum(1 for a in delayed if a <= end + LATE_S),
            "first_applied_after_end_s": round(min(after) - end, 3) if after else None,
            "last_applied_after_end_s": round(max(delayed) - end, 3) if delayed else None}


def main(argv: list[str]) -> None:
    for path in argv:
        doc = json.loads(Path(path).read_text())
        s = summary(doc)
        print(path)
        print(json.dumps({k: v for k, v in s.items() if k not in ("bursts", "outages")},
                         indent=1))
        for o in s["outages"]:
            print(f"outage {o['what']} {o['start']:.1f}-{o['end']:.1f}s: {o['delayed']} changes "
                  f"delayed, {o['landed_by_end_plus_1s']} applied by its end + {LATE_S:g} s; "
                  f"first applied {o['first_applied_after_end_s']} s after its end, last "
                  f"{o['last_applied_after_end_s']} s")
        for b in s["bursts"]:
            t = b["first"]
            near = [c for c in doc["cpu"] if t - 2 <= c["t"] <= b["last"] + 2]
            waits = {}
            for c in near:
                for name, (_, w) in c["processes"].items():
                    waits[name] = round(waits.get(name, 0) + w, 2)
            print(f"burst {b['first']:.1f}-{b['last']:.1f}s: {b['late']} late, worst "
                  f"{b['worst']}; run-queue s around it: {waits}")


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])


def instrument(raw: dict) -> dict:
    """The lab's own share of cachesync's measured lags, from a cell's raw results: how long
    COMMIT took to return (the commit time is taken before it is sent), and how late the
    keyspace watcher heard the writer set a marker (at that moment; it times the unlinks).
    Percentiles in ms."""
    rtt = [c[5] - c[3] for c in raw["changes"] if len(c) > 5]
    heard = [raw["marker_set"][(c[0], c[1])] - c[3] for c in raw["changes"]
             if (c[0], c[1]) in raw["marker_set"]]

    def figures(values):
        return {"p99_ms": _ms(_pct(values, 0.99)), "p99.9_ms": _ms(_pct(values, 0.999)),
                "max_ms": _ms(max(values)) if values else None}
    return {"commit_round_trip": figures(rtt), "watcher_heard_late": figures(heard),
            "watcher_realtime": raw.get("watcher_realtime")}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)
