"""``python -m bench --only dashboard``: the monitoring picture of docs/monitoring.md.

Runs the Kafka pipeline (`cachesync tail` + `cachesync consume`, consistency monitor on) on the
devstack under a steady load (writers updating rows, readers filling them through
`read_through`) with one bulk UPDATE in the middle, has a real Prometheus
(`/usr/bin/prometheus`, Debian's `prometheus` package) scrape both processes every 2 s, then
asks Prometheus's HTTP API for every query of the shipped Grafana dashboard
(docker/grafana/dashboards/cachesync.json) over the run and draws one panel per dashboard
panel: docs/monitoring.png (full run) or bench/results/dashboard-quick.png (``--quick``).
Grafana itself is not needed: the queries are the dashboard's, the rendering is matplotlib's.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from bench.common import ROOT, Sandbox, Worker, free_port, log
from cachesync.client import read_through
from cachesync.devstack import wait_for

DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "cachesync.json"
PICTURE = {"full": ROOT / "docs" / "monitoring.png",
           "quick": ROOT / "bench" / "results" / "dashboard-quick.png"}
SIZES = {"full": {"seconds": 300, "burst_at_s": 150}, "quick": {"seconds": 60, "burst_at_s": 30}}
ROWS = 2000
BURST_ROWS = 20000          # the bulk UPDATE's rows (its own id range)
WRITES_PER_S = 40
READS_PER_S = 200
SCRAPE_S = 2
UNITS = {"ops": "per s"}    # Grafana's unit names; "short" and "none" are plain numbers
DDL = ("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(100) NOT NULL, "
       "n BIGINT NOT NULL)")


def run(stack, quick: bool, runs: int, picture: Path | None = None,
        size: dict | None = None) -> dict:
    """One run (``runs`` is ignored: the picture is of one run), drawn to ``picture`` (default:
    PICTURE of the mode); ``size``: the run's length and when the burst comes (SIZES' form;
    default: the mode's). Raises RuntimeError when Prometheus is missing or a cachesync
    process dies."""
    mode = "quick" if quick else "full"
    prometheus = shutil.which("prometheus")
    if not prometheus:
        raise RuntimeError("prometheus is missing: apt-get install prometheus")
    box = Sandbox(stack, "dashboard")
    try:
        return _run(box, prometheus, size or SIZES[mode], picture or PICTURE[mode])
    finally:
        box.cleanup()


def _run(box: Sandbox, prometheus: str, size: dict, picture: Path) -> dict:
    box.create_schema(DDL)
    _fill(box)
    ports = {"tail": free_port(), "consume": free_port(), "prometheus": free_port()}
    cfg = box.write_config(
        {f"{box.db}.users": {"keys": [box.prefix + "user:{id}"], "ttl": 3600}},
        topic=box.new_topic(), tailer={"heartbeat_interval_s": 1},
        consumer={"dedup_store": "redis"})
    tail = box.spawn("tail", cfg, env={"CACHESYNC_METRICS_LISTEN": f"127.0.0.1:{ports['tail']}"})
    consume = box.spawn("consume", cfg, env={
        "CACHESYNC_METRICS_LISTEN": f"127.0.0.1:{ports['consume']}",
        "CACHESYNC_MONITOR_SAMPLE_RATIO": "0.2"})
    prom = _start_prometheus(box, prometheus, ports)
    try:
        _wait_scraped(ports["prometheus"], box, (tail, consume))
        start = time.time()
        stop = threading.Event()
        workers = [Worker(lambda: _writer(box, stop), "writer"),
                   Worker(lambda: _reader(box, stop), "reader")]
        for w in workers:
            w.start()
        while time.time() - start < size["burst_at_s"]:
            _check_alive(box, (tail, consume))
            time.sleep(1)
        log(f"dashboard: bulk UPDATE of {BURST_ROWS} rows")
        box.stack.admin_sql(f"UPDATE `{box.db}`.users SET n = n + 1 WHERE id > {ROWS}")
        while time.time() - start < size["seconds"]:
            _check_alive(box, (tail, consume))
            time.sleep(1)
        stop.set()
        for w in workers:
            w.join()
            w.check()
        end = time.time() + 2 * SCRAPE_S
        time.sleep(2 * SCRAPE_S)        # the last samples reach Prometheus
        panels = _query_dashboard(ports["prometheus"], start, end)
    finally:
        prom.terminate()
        prom.wait(30)
    _draw(panels, picture, size)
    log(f"dashboard: wrote {picture}")
    return {"picture": str(picture), "seconds": size["seconds"],
            "writes_per_s": WRITES_PER_S, "reads_per_s": READS_PER_S, "burst_rows": BURST_ROWS,
            "scrape_interval_s": SCRAPE_S, "summary": _summary(panels)}


# -- load ---------------------------------------------------------------------------
def _fill(box: Sandbox) -> None:
    rows = [(i, f"u{i}@x", 0) for i in range(1, ROWS + BURST_ROWS + 1)]
    with box.stack.admin(box.db, autocommit=False) as conn, conn.cursor() as cur:
        for at in range(0, len(rows), 5000):
            cur.executemany("INSERT INTO users VALUES (%s, %s, %s)", rows[at:at + 5000])
        conn.commit()


def _writer(box: Sandbox, stop: threading.Event) -> None:
    with box.stack.admin(box.db) as conn, conn.cursor() as cur:
        while not stop.is_set():
            cur.execute("UPDATE users SET n = n + 1 WHERE id = %s", (random.randint(1, ROWS),))
            time.sleep(1 / WRITES_PER_S)


def _reader(box: Sandbox, stop: threading.Event) -> None:
    """An application filling through read_through: the row as JSON, as the monitor expects."""
    cache = box.stack.redis()
    with box.stack.admin(box.db) as conn, conn.cursor() as cur:
        def load(i: int) -> bytes:
            cur.execute("SELECT id, email, n FROM users WHERE id = %s", (i,))
            row = cur.fetchone()
            return json.dumps({"id": row[0], "email": row[1], "n": row[2]}).encode()
        while not stop.is_set():
            i = random.randint(1, ROWS)
            read_through(cache, f"{box.prefix}user:{i}", lambda: load(i), ttl_s=3600)
            time.sleep(1 / READS_PER_S)


def _check_alive(box: Sandbox, procs) -> None:
    for proc in procs:
        if proc.poll() is not None:
            raise RuntimeError(f"a cachesync process exited: {box.proc_log(proc)}")


# -- Prometheus -----------------------------------------------------------------------
def _start_prometheus(box: Sandbox, binary: str, ports: dict) -> subprocess.Popen:
    config = box.tmp / "prometheus.yml"
    config.write_text(json.dumps({     # JSON is YAML
        "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
        "scrape_configs": [{"job_name": "cachesync", "static_configs": [{"targets": [
            f"127.0.0.1:{ports['consume']}", f"127.0.0.1:{ports['tail']}"]}]}]}))
    out = open(box.tmp / "prometheus.log", "w")
    return subprocess.Popen([binary, f"--config.file={config}",
                             f"--storage.tsdb.path={box.tmp / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{ports['prometheus']}"],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _api(port: int, path: str, **params) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        doc = json.load(response)
    if doc.get("status") != "success":
        raise RuntimeError(f"prometheus: {doc}")
    return doc["data"]


def _wait_scraped(port: int, box: Sandbox, procs) -> None:
    """Both targets up in Prometheus (so the picture starts with data)."""
    def up():
        _check_alive(box, procs)
        try:
            found = _api(port, "query", query="up")["result"]
        except OSError:
            return False
        return len(found) == 2 and all(r["value"][1] == "1" for r in found)
    wait_for(up, 120, "Prometheus to scrape tail and consume", 0.5)


def _query_dashboard(port: int, start: float, end: float) -> list[dict]:
    """Every panel of the shipped dashboard with each target's series over [start, end]."""
    panels = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        series = []
        for target in panel.get("targets", []):
            data = _api(port, "query_range", query=target["expr"], start=start, end=end,
                        step=SCRAPE_S)
            for result in data["result"]:
                label = _legend(target.get("legendFormat", ""), result["metric"])
                points = [(float(t) - start, float(v)) for t, v in result["values"]]
                series.append({"label": label, "points": points})
        panels.append({"title": panel["title"], "unit": panel.get("fieldConfig", {})
                       .get("defaults", {}).get("unit", ""), "series": series})
    return panels


def _legend(template: str, metric: dict) -> str:
    out = template
    for name, value in metric.items():
        out = out.replace("{{" + name + "}}", value)
    return out or ",".join(f"{k}={v}" for k, v in metric.items())


# -- the picture ----------------------------------------------------------------------
def _draw(panels: list[dict], path: Path, size: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = 2
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(13, 3.1 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        scale, unit = (1000, "ms") if panel["unit"] == "s" else (1, UNITS.get(panel["unit"], ""))
        for s in panel["series"]:
            xs = [t for t, v in s["points"] if v == v]        # NaN: no data at that step
            ys = [v * scale for t, v in s["points"] if v == v]
            ax.plot(xs, ys, label=s["label"], linewidth=1.3)
        ax.axvline(size["burst_at_s"], color="#999999", linestyle=":", linewidth=1)
        ax.set_title(panel["title"], fontsize=10)
        ax.set_xlim(0, size["seconds"])
        if unit:
            ax.set_ylabel(unit, fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if panel["series"]:
            ax.legend(fontsize=7, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#999999")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("seconds into the run (dotted: the bulk UPDATE)", fontsize=8)
    fig.suptitle("cachesync dashboard queries, scraped by Prometheus from tail and consume on "
                 f"the devstack ({WRITES_PER_S} updates/s, {READS_PER_S} read_through reads/s, "
                 f"one {BURST_ROWS:,}-row UPDATE)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _summary(panels: list[dict]) -> dict:
    """The largest value of each series, so the JSON says what the picture shows."""
    out = {}
    for panel in panels:
        for s in panel["series"]:
            values = [v for _, v in s["points"] if v == v]
            if values:
                out[f"{panel['title']} / {s['label']}"] = {"max": round(max(values), 6),
                                                           "last": round(values[-1], 6)}
    return out
