"""The throughput-and-lag targets as a table: each median beside its same-run baseline.

``render(doc)`` takes the JSON document ``python -m bench`` writes and returns text;
figures a run did not measure are left out. FOUNDATION holds the figures measured
before the throughput work (README, bench/results/full-20261122T130129Z.json), so the
table also shows how far each figure moved.
"""

from __future__ import annotations

FOUNDATION = {
    "tailer": "4,152 rows/s (0.215x raw)",
    "consumer": "10,038 keys/s (MySQL dedup, one record per row)",
    "lag": "at 200/s: p50 12.3 ms, p99 61.7 ms",
}


def render(doc: dict) -> str:
    rows: list[tuple[str, str, str, str, str]] = []
    b = doc.get("benchmarks", {})
    if "tailer" in b:
        rows += _tailer(b["tailer"])
        rows += _peers(b["tailer"].get("peers"))
    if "consumer" in b:
        rows += _consumer(b["consumer"])
    if "lag" in b:
        rows += _lag(b["lag"])
    if "soak" in b:
        rows += _soak(b["soak"])
    if "head_cost" in b:
        rows += _head_cost(b["head_cost"])
    if not rows:
        return ""
    head = ("figure", "cachesync (median)", "baseline, same run (median)", "target", "before")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(head), line(tuple("-" * w for w in widths)), *map(line, rows)])


def _met(ok: bool | None) -> str:
    return "?" if ok is None else ("MET" if ok else "missed")


def _n(x, unit: str = "") -> str:
    return "-" if x is None else f"{x:,.0f}{unit}"


def _tailer(t: dict) -> list:
    out = []
    for fig, label in ((t, "5 cols"), (t.get("wide"), "30 cols")):
        if not fig:
            continue
        r = fig["ratio_contender_to_baseline"]
        rows = fig.get("table", {}).get("rows") or t.get("params", {}).get("rows")
        target = f">= 10x raw: {_met(r is not None and r >= 10)}" if label == "5 cols" else "(reported)"
        raw = f"raw pymysqlreplication {_n(fig['baseline']['median']['rows_per_s'])} rows/s"
        out.append((f"tailer binlog->Kafka acked, {label}, {rows:,} rows, packed",
                    f"{_n(fig['contender']['median']['rows_per_s'])} rows/s = {r}x", raw,
                    target, FOUNDATION["tailer"] if label == "5 cols" else "-"))
        unpacked = fig.get("unpacked")
        if unpacked:
            out.append(("  same, one record per row (pack_rows 1)",
                        f"{_n(unpacked['median']['rows_per_s'])} rows/s = "
                        f"{unpacked['ratio_to_baseline']}x", raw, "(reported)", "-"))
        python_rows = fig.get("python_rows")
        if python_rows:
            out.append(("  same, every row written by the Python path (compiled row writer off)",
                        f"{_n(python_rows['median']['rows_per_s'])} rows/s; default = "
                        f"{python_rows['ratio_contender_to_it']}x it", raw, "(reported)", "-"))
    return out


def _peers(p: dict | None) -> list:
    """cachesync's default tailer beside Debezium and Canal, per shape (first row to last)."""
    out = []
    for shape in ("S", "M"):
        fig = (p or {}).get(shape)
        if not fig:
            continue
        r = fig["readers"]
        peers = (f"Debezium {_n(r['debezium']['rows_per_s'])}, Canal {_n(r['canal']['rows_per_s'])} "
                 f"rows/s" if not p.get("peers_missing") else f"peers: {p['peers_missing']}")
        target = "; ".join(f"{t['target'].split(' (')[0]}: {_met(t['met'])}" for t in fig["targets"])
        ratios = " / ".join(str(v) for v in fig["ratios"].values())
        out.append((f"tailer vs peers, shape {shape}, {fig['rows']:,} rows, default",
                    f"{_n(r['contender']['rows_per_s'])} rows/s = {ratios}x", peers, target, "-"))
    return out


def _consumer(c: dict) -> list:
    ceiling = c["baseline"]["median"]["keys_per_s"]
    unlink = (c.get("multi_key_unlink") or {}).get("median", {}).get("keys_per_s")
    out = []
    for fig, label in ((c["contender"], "redis dedup, packed"), (c.get("mysql_dedup"), "mysql dedup, packed"),
                       (c.get("unpacked"), "redis dedup, one record per row")):
        if not fig:
            continue
        keys = fig["median"]["keys_per_s"]
        frac = keys / ceiling if keys and ceiling else None
        target = (f">= 50k keys/s: {_met(keys is not None and keys >= 50_000)}; "
                  f">= 0.6x: {_met(frac is not None and frac >= 0.6)}")
        out.append((f"consumer Kafka->Redis, {label}",
                    f"{_n(keys)} keys/s = {frac:.3f}x" if frac else _n(keys),
                    f"redis-py pipelined DEL {_n(ceiling)} keys/s", target,
                    FOUNDATION["consumer"] if label.startswith("mysql") else "-"))
    if unlink:
        out.append(("  reference: one UNLINK of 2000 keys per round trip", "-",
                    f"{_n(unlink)} keys/s", "(reported)", "-"))
    return out


def _lag(lag: dict) -> list:
    out = []
    for rate, fig in lag.get("rates", {}).items():
        m, f = fig["contender"]["median"], fig["baseline"]["median"]
        target = (f"p99 <= {fig['target_p99_ms']:.0f} ms: {_met(m['p99_ms'] is not None and m['p99_ms'] <= fig['target_p99_ms'])}"
                  if rate == "1000" else "(reported)")
        out.append((f"commit->Redis at {rate}/s for {fig['seconds']:.0f}s "
                    f"(achieved {_n(m['achieved_rate'])}/s)",
                    f"p50 {m['p50_ms']} / p99 {m['p99_ms']} / max {m['max_ms']} ms",
                    f"floor p50 {f['p50_ms']} / p99 {f['p99_ms']} ms", target,
                    FOUNDATION["lag"] if rate == "1000" else "-"))
    return out


def _soak(s: dict) -> list:
    out = []
    for name, g in s.get("rss_growth", {}).items():
        growth = g.get("growth")
        out.append((f"soak RSS growth, {name}, {s['params']['minutes']:g} min",
                    "-" if growth is None else f"{g['from_mb']} -> {g['to_mb']} MB ({growth:+.1%})",
                    "-", f"<= 10 %: {_met(None if growth is None else growth <= 0.10)}", "-"))
    big = s.get("big_transaction")
    if big:
        peaks = ", ".join(f"{n} +{mb} MB" for n, mb in big["peak_above_before_mb"].items())
        out.append((f"one {big['rows']:,}-row transaction", f"applied in {big['applied_s']} s; "
                    f"peak RSS {peaks}", "-", "bounded memory", "-"))
    return out


def _head_cost(h: dict) -> list:
    """CPU per commit beside mariadbd's: at most it at 1,000/s and up, twice it at 100/s;
    idle, at most 1 % of a core per process; p50 <= 15 ms and p99 <= 50 ms throughout."""
    out = []
    for config, fig in h.get("configs", {}).items():
        for rate, f in fig["rates"].items():
            m = f["median"]
            if rate == "0":
                worst = max((m.get(f"{n}_core_pct") or 0) for n in fig["processes"])
                out.append((f"{config} idle", f"{m['sidecar_core_pct']} % of a core",
                            f"mariadbd {m.get('mariadbd_core_pct')} %",
                            f"<= 1 % per process: {_met(worst <= 1)}", "-"))
                continue
            bound = 2 if float(rate) < 1000 else 1
            ratio, p50, p99 = m["sidecar_x_mariadbd"], m["p50_ms"], m["p99_ms"]
            lag = None if p50 is None or p99 is None else p50 <= 15 and p99 <= 50
            out.append((f"{config} at {rate}/s (achieved {_n(m['achieved_rate'])}/s)",
                        f"{_n(m['sidecar_us'])} us/commit = {ratio}x; p50 {p50} / p99 {p99} ms",
                        f"mariadbd {_n(m['mariadbd_us'])} us/commit, broker {_n(m['kafka_us'])}",
                        f"<= {bound}x: {_met(None if ratio is None else ratio <= bound)}; "
                        f"lag: {_met(lag)}", "-"))
    return out
