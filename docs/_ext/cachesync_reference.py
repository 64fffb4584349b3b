"""The reference pages, generated from the code's own declarations so they cannot drift.

* configuration: the settings dataclasses of ``cachesync.runtime.config`` (each field's ``doc``,
  default, secret flag) and the table-entry fields of ``cachesync.schema.mapping``;
* CLI: the click commands of ``cachesync.cli``;
* metrics: the metric families the sidecar's registries expose.

Each ``*_markdown()`` function is pure (it imports the package, reads nothing else) and is
tested in tests/unit. As a Sphinx extension, the module writes the pages into
``docs/reference/`` when a build starts (they are not committed).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

CONFIG_INTRO = """\
# Configuration reference

Settings come from the YAML file given with `--config` (or `CACHESYNC_CONFIG`) and from
environment variables `CACHESYNC_<SECTION>_<FIELD>`, which win. `CACHESYNC_<SECTION>_<FIELD>_FILE`
reads the value from a file (Docker and Kubernetes secrets). `--env-file` loads a `KEY=VALUE`
file first (variables already set win). Every value is checked when the settings load (types,
ranges, finite numbers, ports, non-empty lists, identifiers) and every error names the field;
secrets never appear in logs.

This page is generated from the settings declarations in `cachesync/runtime/config.py`.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def default_text(f: dataclasses.Field) -> str:
    """How the reference shows a field's default: `literal`, or words for empty / computed."""
    shown = f.metadata.get("shown")
    if shown:
        return shown
    value = f.default
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def configuration_markdown() -> str:
    """The configuration reference page (Markdown)."""
    from cachesync.runtime import config
    from cachesync.schema import mapping

    out = [CONFIG_INTRO]
    for section, cls in config.SECTIONS.items():
        out += [f"\n## `{section}`\n", "| setting | default | meaning |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            env = f"{config.ENV_PREFIX}{section.upper()}_{f.name.upper()}"
            doc = f.metadata.get("doc", "")
            if f.metadata.get("secret"):
                doc += f". Secret: never logged; `{env}_FILE` reads it from a file"
            out.append(f"| `{section}.{f.name}`<br>`{env}` | {_cell(default_text(f))} "
                       f"| {_cell(doc)} |")
    out += ["\n## `tables`\n",
            "One entry per mapped table, `tables: {<db.table>: {...}}` (no environment "
            "variables).\n", "| field | default | meaning |", "|---|---|---|"]
    for name, (default, doc) in mapping.FIELD_DOCS.items():
        out.append(f"| `tables.<db.table>.{name}` | {_cell(default)} | {_cell(doc)} |")
    return "\n".join(out) + "\n"


CLI_INTRO = """\
# CLI reference

Every command of `cachesync`, with the text its `--help` prints (this page is generated from
the click commands in `cachesync/cli.py` and `cachesync/commands/`).

Exit codes: `0` ok, `1` runtime failure (a dependency stayed unavailable), `2` usage or
configuration error, `3` server not ready (settings, grants, credentials), the tailer's binlog
position is gone (purged), or Kafka refused a record for good, `4` `explain`/`lint` found a
problem or `audit` found the staleness ratio over its limit.
"""


def cli_markdown() -> str:
    """The CLI reference page: each command's summary and its ``--help`` text."""
    import click

    from cachesync.cli import cli

    out = [CLI_INTRO, "\n## `cachesync`\n", _help_block(cli, "cachesync", None)]
    out += _commands(cli, "cachesync", click.Context(cli, info_name="cachesync"))
    return "\n".join(out) + "\n"


def _commands(group, path: str, parent) -> list[str]:
    import click

    out = []
    for name in sorted(group.list_commands(parent)):
        command = group.get_command(parent, name)
        if command is None or command.hidden:
            continue
        full = f"{path} {name}"
        level = "#" * min(2 + full.count(" "), 4)
        out += [f"\n{level} `{full}`\n", command.get_short_help_str(limit=200) + "\n",
                _help_block(command, full, parent)]
        if isinstance(command, click.Group):
            out += _commands(command, full, click.Context(command, info_name=name, parent=parent))
    return out


def _help_block(command, full: str, parent) -> str:
    import click

    ctx = click.Context(command, info_name=full.split()[-1], parent=parent,
                        max_content_width=88, terminal_width=88)   # fits the page's code block
    return "```text\n" + command.get_help(ctx).rstrip() + "\n```\n"


# Constructors whose first argument is a metric name (prometheus_client's and the custom
# collectors' families), read from the source so a renamed metric renames its row.
_METRIC_CALLS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram",
                 "Summary": "summary", "Info": "info", "CounterMetricFamily": "counter",
                 "GaugeMetricFamily": "gauge", "HistogramMetricFamily": "histogram"}
METRIC_SOURCES = ("cachesync", "consumer", "producer_outbox")


def metric_definitions(root: Path) -> list[dict]:
    """Every ``cachesync_*`` metric the code defines: name, type, help, labels, module.

    Found in the source (``ast``): calls of the metric constructors with a literal name, and
    the name -> (help, ...) tables the scrape-time collectors read (their counters).
    """
    import ast

    found: dict[str, dict] = {}
    for folder in METRIC_SOURCES:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            module = str(path.relative_to(root))
            for node in ast.walk(tree):
                for item in _metrics_in(node):
                    found.setdefault(item["name"], {**item, "module": module})
    return sorted(found.values(), key=lambda m: m["name"])


def _literal(node) -> str | None:
    import ast
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _metrics_in(node) -> list[dict]:
    import ast

    if isinstance(node, ast.Call):
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        if name in _METRIC_CALLS and node.args and (_literal(node.args[0]) or "").startswith("cachesync_"):
            labels = node.args[2] if len(node.args) > 2 else next(
                (k.value for k in node.keywords if k.arg in ("labels", "labelnames")), None)
            return [{"name": _literal(node.args[0]), "type": _METRIC_CALLS[name],
                     "help": _literal(node.args[1]) if len(node.args) > 1 else "",
                     "labels": _labels(labels)}]
    if isinstance(node, ast.Dict):       # {"cachesync_x": ("help", attr)} or {k: ("cachesync_x", "help")}
        out = []
        for key, value in zip(node.keys, node.values):
            if not isinstance(value, ast.Tuple) or len(value.elts) < 2:
                continue
            texts = [_literal(e) for e in value.elts]
            key_text = _literal(key) if key is not None else None
            if key_text and key_text.startswith("cachesync_") and texts[0]:
                out.append({"name": key_text, "type": "counter", "help": texts[0], "labels": ""})
            elif texts[0] and texts[0].startswith("cachesync_") and texts[1]:
                labels = "table, reason" if "reason" in texts[1] else "table"
                out.append({"name": texts[0], "type": "counter", "help": texts[1],
                            "labels": labels})
        return out
    return []


def _labels(node) -> str:
    import ast
    if isinstance(node, (ast.List, ast.Tuple)):
        return ", ".join(filter(None, (_literal(e) for e in node.elts)))
    if isinstance(node, ast.IfExp):
        return _labels(node.body)
    return ""


METRICS_INTRO = """\
# Metrics reference

`consume`, `tail`, `relay` and `monitor` each serve `/metrics` (Prometheus text, one registry
per process), `/healthz` (200 while the process is alive) and `/readyz` (200, or 503 with one
reason per line) on `metrics.listen`, loopback by default (`auto`: consume 9464, tail 9465,
relay 9466, monitor 9467).

This page is generated from the metric definitions in the source. Counters are exposed with
the `_total` suffix.
"""


def metrics_markdown(root: Path | None = None) -> str:
    """The metrics reference page."""
    root = root or Path(__file__).resolve().parents[2]
    out = [METRICS_INTRO, "| metric | meaning |", "|---|---|"]
    from cachesync.runtime import metrics

    deprecated = set(getattr(metrics, "DEPRECATED_ALIASES", {}).values())
    for m in metric_definitions(root):
        if m["name"] in deprecated:
            continue                 # listed under "Deprecated names"
        name = m["name"] + ("_total" if m["type"] == "counter" else "")
        labels = f", labels {_cell(m['labels'])}" if m["labels"] else ""
        out.append(f"| `{name}`<br>{m['type']}{labels} | {_cell(m['help'])} |")
    out += _deprecated_aliases({m["name"]: m["type"] for m in metric_definitions(root)})
    return "\n".join(out) + "\n"


def _deprecated_aliases(types: dict[str, str]) -> list[str]:
    """Old names still exported beside their new ones (``cachesync.runtime.metrics.DEPRECATED_ALIASES``)."""
    from cachesync.runtime import metrics

    aliases = getattr(metrics, "DEPRECATED_ALIASES", {})
    if not aliases:
        return []
    suffix = lambda name: "_total" if types.get(name) == "counter" else ""  # noqa: E731
    out = ["\n## Deprecated names\n",
           "Still exported beside the new name, with a help text naming it, for one more "
           "version; move dashboards and alerts to the new name.\n",
           "| old name | new name |", "|---|---|"]
    for new, old in sorted(aliases.items(), key=lambda kv: kv[1]):
        out.append(f"| `{old}{suffix(new)}` | `{new}{suffix(new)}` |")
    return out


PERFORMANCE_INTRO = """\
# Performance figures

Generated from the committed results in `bench/results/`: for each benchmark, the newest full
run that measured it, with the command that made it and the host it ran on. Every figure
stands beside a baseline measured in the same run (medians of the runs given). The
benchmarks run on a 2-core host, often shared with other work: the load average each run
ended with is in the table, and a figure measured at a high load says more about the host
than about cachesync. Read ratios, not absolute numbers.
How to run and read them: [Performance](../performance.md) and [Consistency in nines](../consistency.md).
"""


def performance_markdown(root: Path | None = None) -> str:
    """Tables of the newest committed full run of each benchmark."""
    import json
    import sys

    root = root or Path(__file__).resolve().parents[2]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from bench import perf_table
    from bench.consistency import report

    newest: dict[str, tuple[str, dict]] = {}
    for path in sorted((root / "bench" / "results").glob("full-*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for name in doc.get("benchmarks", {}):
            if not newest.get(name) or doc["started_at"] >= newest[name][1]["started_at"]:
                newest[name] = (path.name, doc)
    out = [PERFORMANCE_INTRO,
           "| benchmark | results file | command | started | host | load average after |",
           "|---|---|---|---|---|---|"]
    for name, (file, doc) in sorted(newest.items()):
        host = doc.get("host", {})
        load = doc["benchmarks"][name].get("loadavg_after") if isinstance(
            doc["benchmarks"][name], dict) else None
        load_text = f"{load[0]:.1f}" if load else "not recorded"
        out.append(f"| `{name}` | `bench/results/{file}` | `{doc.get('command', '')}` | "
                   f"{doc.get('started_at', '')[:16]} | {host.get('cpus', '?')} CPUs, "
                   f"Python {host.get('python', '?')} | {load_text} |")
    out.append("\n## Throughput and lag\n")
    for name in ("tailer", "consumer", "lag", "soak"):
        if name in newest:
            file, doc = newest[name]
            one = {**doc, "benchmarks": {name: doc["benchmarks"][name]}}
            text = perf_table.render(one)
            if text:
                out += [f"\n### `{name}`\n", f"`{doc.get('command')}` → `bench/results/{file}`\n",
                        "```text\n" + text + "\n```\n"]
    if "consistency" in newest:
        file, doc = newest["consistency"]
        out += ["\n## Consistency lab\n",
                f"`{doc.get('command')}` → `bench/results/{file}`\n",
                report.markdown(doc["benchmarks"]["consistency"])]
    return "\n".join(out) + "\n"


PAGES = {"configuration.md": configuration_markdown, "cli.md": cli_markdown,
         "metrics.md": metrics_markdown, "performance-figures.md": performance_markdown}


def write_pages(target: Path) -> list[Path]:
    """Writes every generated page into ``target`` (only when its text changed)."""
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in PAGES.items():
        path, text = target / name, make()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _on_builder_inited(app) -> None:
    write_pages(Path(app.srcdir) / "reference")


def setup(app):
    app.connect("builder-inited", _on_builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":      # python docs/_ext/cachesync_reference.py: write the pages
    for page in write_pages(Path(__file__).resolve().parents[1] / "reference"):
        print(page)
