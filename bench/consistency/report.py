"""The lab's README tables from its JSON: ``python -m bench.consistency.report FILE``.

FILE is a ``python -m bench`` document (or the lab's own section of it): the small lab's
(``consistency``) or the large cells' (``consistency_nines``) tables in nines.
"""

from __future__ import annotations

import json
import sys

from cachesync.consumer.core.nines import BOUNDS_S, label


def markdown(lab: dict) -> str:
    """Three tables: stale reads and keys left per strategy and fault class (with the lag
    window and the lag through the replica's tailer); the longest stale time and reads
    served; the targets per fault class, the headline strategy's in bold."""
    table, classes = lab["median"], list(lab["median"])
    names = list(lab["strategies"])
    head = "| strategy | " + " | ".join(classes) + " |\n|---|" + "---|" * len(classes)
    stale = [f"| {lab['strategies'][n]} | "
             + " | ".join(_cell(table[c][n]) for c in classes) + " |" for n in names]
    longest = [f"| {n} | " + " | ".join(_longest(table[c][n]) for c in classes) + " |"
               for n in names]
    window = "| lag window (median) | " + " | ".join(
        f"{lab['lag_window_ms'][c]['median']:g} ms" for c in classes) + " |"
    through = lab.get("tail_replica_lag_ms")
    tail = ["| lag through the replica's tailer (p50 / max) | " + " | ".join(
        _lag(through[c]) for c in classes) + " |"] if through else []
    heads = lab.get("headline", {})
    targets = [f"| {c} | {_name(n, heads.get(c) == n)} | {_yes(t['stale_keys_zero'])} | "
               f"{t['stale_reads']} | "
               f"{t['best_other']} ({_ratio(t['best_other_ratio'])}) | "
               f"{_ratio(t['cachesync_ratio'])} |"
               for c, per in lab["targets"].items() for n, t in per.items()]
    return "\n".join([
        "Stale reads beyond the lag window (ratio, and nines of consistent reads) · stale keys "
        "left after writes stop:", "",
        head, *stale, window, *tail, "",
        "Longest time a key was seen stale (ms) · reads served per second:", "",
        head.replace("strategy", "strategy (name in the JSON)"), *longest, "",
        "Targets, each cachesync strategy against the best app strategy (the issue's are "
        "for the one in bold: delete mode + read_through, tailing the readers' replica in the "
        "replica classes):", "",
        "| fault class | cachesync strategy | 0 stale keys | stale reads: ≥ 100x lower or zero "
        "| best other (ratio) | its ratio |", "|---|---|---|---|---|---|", *targets])


def _ratio(r: float | None) -> str:
    if r is None:
        return "–"
    return "0" if r == 0 else f"{r * 100:.2g} %"


def _cell(c: dict) -> str:
    nines = f" ({c['nines']:g} nines)" if c.get("nines") is not None else ""
    return f"{_ratio(c['stale_read_ratio'])}{nines} · {c['stale_keys_after']:g}"


def _longest(c: dict) -> str:
    return f"{c['longest_stale_ms']:g} · {c['reads_per_s']:,.0f}/s"


def _lag(x: dict) -> str:
    return "–" if x.get("p50") is None else f"{x['p50']:g} / {x['max']:g} ms"


def _name(name: str, headline: bool) -> str:
    return f"**{name}**" if headline else name


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def nines_markdown(lab: dict) -> str:
    """The large cells' table: per fault class and strategy, changes applied within 100 ms
    and 1 s, the p99.9 commit -> invalidation, reads not stale and not stale beyond the
    lag, in nines (``≥``: none failed, the 95 % bound 3/n), and the stale keys left."""
    head = ("| class | strategy | changes within 100 ms | within 1 s | p99.9 | reads not stale "
            "| not stale beyond the lag | stale keys left | reads · writes |\n"
            "|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for fault, cells in lab["classes"].items():
        for name, c in cells.items():
            lines.append(
                f"| {fault} | {name} | {_change_cells(c['per_change'])} "
                f"| {_share(c['per_read']['stale'])} "
                f"| {_share(c['per_read']['beyond_lag'])} | {c['stale_keys_after']} "
                f"| {c['reads']:,} · {c['writes']:,} |")
    return "\n".join(lines)


def outages_markdown(lab: dict) -> str:
    """The kill class without its outage windows, and its deadline check."""
    lines = ["| strategy | changes within 100 ms | within 1 s | p99.9 | reads not stale beyond "
             "the lag | reads excluded (s) | faults | landed by outage + 1 s |",
             "|---|---|---|---|---|---|---|---|"]
    for name, c in lab["classes"].get("kill", {}).items():
        o = c.get("outside_outages")
        if not o:
            continue
        check = c["deadline_check"]
        faults = ", ".join(_fault(x) for x in c["outages"])
        lines.append(f"| {name} | {_change_cells(o['per_change'])} "
                     f"| {_share(o['per_read']['beyond_lag'])} "
                     f"| {o['read_windows_excluded_s']:g} | {faults} "
                     f"| {check['landed_by_deadline']:,} of "
                     f"{check['landed_by_deadline'] + check['missed_deadline']:,} |")
    return "\n".join(lines)


def _fault(x: dict) -> str:
    """``kafka 30.3 s (+0.52)``: the outage, and how long after its end the last change it
    delayed was applied."""
    after = x.get("last_delayed_applied_after_end_s")
    return f"{x['what']} {x['seconds']:g} s" + (f" (+{after:g})" if after is not None else "")


def cpu_markdown(lab: dict) -> str:
    """Per class, cachesync's cell: each process's share of a CPU and of time queued for one."""
    lines = ["| class | process | CPU (share of a core) | queued for a CPU | host busy |",
             "|---|---|---|---|---|"]
    for fault, cells in lab["classes"].items():
        cpu = cells.get("cachesync", {}).get("cpu")
        if not cpu:
            continue
        busy = f"{cpu['host_busy_cpu_s'] / cpu['seconds']:.2f} of {cpu['host_cpus']} cores"
        for name, p in cpu["processes"].items():
            lines.append(f"| {fault} | {name} | {p['cpu_share']:.2f} | {p['waited_share']:.2f} "
                         f"| {busy} |")
    return "\n".join(lines)


def _change_cells(figure: dict) -> str:
    """The share of changes within each bound (100 ms, 1 s), then the p99.9."""
    return " | ".join([*(_share(figure["within"][label(b)]) for b in BOUNDS_S), _p999(figure)])


def _p999(figure: dict) -> str:
    """The p99.9 commit -> invalidation, or "never" when more than 0.1 % never came."""
    if figure.get("never_applied", 0) > figure["changes"] * (1 - 0.999):
        return "never"
    return f"{figure['p99.9_ms']:,.0f} ms"


def _share(s: dict) -> str:
    """``99.99 % (4.0)`` or, where none failed, ``100 % (≥ 6.5)``."""
    if s["ratio"] is None:
        return "–"
    if s["nines"] is None:
        return f"100 % (≥ {s['nines_at_least']:g})" if s["nines_at_least"] else "100 %"
    return f"{s['ratio'] * 100:.6g} % ({s['nines']:g})"


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as f:
        doc = json.load(f)
    benchmarks = doc.get("benchmarks", {})
    if "consistency_nines" in benchmarks or "classes" in doc:
        lab = benchmarks.get("consistency_nines", doc)
        print(nines_markdown(lab) + "\n\n" + outages_markdown(lab) + "\n\n" + cpu_markdown(lab))
        return 0
    print(markdown(benchmarks.get("consistency", doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
