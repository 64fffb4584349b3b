"""``cachesync replay``: invalidate the keys of a range of the change topic again."""

from __future__ import annotations

import json
import time
from contextlib import nullcontext

import click

from cachesync.runtime import logs
from cachesync.commands.common import handle_errors, settings_options
from cachesync.progress import Progress
from cachesync.runtime.config import Settings
from cachesync.wiring import SettingsAdapters, build_cache, mappings as configured_mappings, range_reader


class _BoundType(click.ParamType):
    name = "BOUND"

    def convert(self, value, param, ctx):
        from cachesync.consumer.replay import Bound, parse_bound
        if isinstance(value, Bound):
            return value
        try:
            return parse_bound(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


@click.command("replay")
@settings_options
@click.option("--engine", "engine_kind", type=click.Choice(["python", "spark"]),
              default="python", show_default=True)
@click.option("--from", "start", type=_BoundType(), default="earliest", show_default=True,
              help="earliest, latest, an offset (every partition), 0:120,1:98, an ISO 8601 "
                   "time (2026-11-22T12:00:00Z) or @<epoch ms>.")
@click.option("--to", "end", type=_BoundType(), default="latest", show_default=True,
              help="exclusive end, same forms as --from.")
@click.option("--table", "tables", multiple=True, metavar="DB.TABLE",
              help="replay only these mapped tables (repeatable).")
@click.option("--dry-run", is_flag=True,
              help="count the distinct keys per table it would delete; touch nothing.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True),
              help="at most this many events per second (default: unlimited).")
@click.option("--spark-master", envvar="CACHESYNC_SPARK_MASTER", help="[spark] master URL.")
def command(settings: Settings, engine_kind, start, end, tables, dry_run, rate,
            spark_master) -> None:
    """Delete again the keys that events in a range of the change topic map to.

    Invalidate-only, also for tables in update mode: deletes are safe in any order
    and any number of times, so a replay can run beside the consumer and twice.
    Prints a JSON report on stdout and a table on stderr.
    """
    with handle_errors():
        mappings = configured_mappings(settings)
        unknown = [t for t in tables if "." not in t or mappings.get(*t.split(".", 1)) is None]
        if unknown:
            raise click.UsageError(f"--table {', '.join(unknown)}: not a mapped table "
                                   f"(mapped: {', '.join(m.table for m in settings.tables.entries)})")
        report = run_replay(settings, mappings, engine_kind, start, end, tuple(tables), dry_run,
                            rate, spark_master)
        click.echo(json.dumps(report.to_dict(), indent=2))
        if not logs.json_enabled():
            click.echo(render_table(report), err=True)


def run_replay(settings: Settings, mappings, engine_kind: str, start, end, tables=(),
               dry_run: bool = False, rate: float | None = None, spark_master=None,
               spark=None, show_progress: bool = True):
    """Resolve the range, replay it on the chosen engine; returns a ReplayReport."""
    from cachesync.consumer.replay import report_from_counts
    k = settings.kafka
    ranges = _ranges(settings, start, end)
    total = sum(hi - lo for lo, hi in ranges.values())
    t0 = time.perf_counter()
    with Progress(f"replay {k.topic} (records)", total, show=show_progress) as bar:
        if engine_kind == "spark":
            counts = _replay_spark(settings, mappings, ranges, tables, dry_run, rate,
                                   spark_master, spark, bar.update)
        else:
            counts = _replay_python(settings, mappings, ranges, tables, dry_run, rate, bar.update)
    return report_from_counts(engine_kind, dry_run, ranges, counts, time.perf_counter() - t0)


def _ranges(settings: Settings, start, end):
    from cachesync.consumer.replay import resolve_ranges
    consumer = range_reader(settings)
    try:
        return resolve_ranges(consumer, settings.kafka.topic, start, end)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    finally:
        consumer.close()


def _replay_python(settings, mappings, ranges, tables, dry_run, rate, progress):
    from cachesync.consumer.replay import READER_OPTIONS, ReplayApplier, replay_python
    cache = None if dry_run else build_cache(settings)
    try:
        applier = ReplayApplier(mappings, cache, tables, settings.consumer.batch_size)
        return replay_python(range_reader(settings, **READER_OPTIONS), settings.kafka.topic,
                             ranges, applier, rate, settings.consumer.batch_size, progress)
    finally:
        if cache is not None:
            cache.close()


def _replay_spark(settings, mappings, ranges, tables, dry_run, rate, master, spark, progress):
    from cachesync.consumer.spark.applier import ReplayConfig
    from cachesync.consumer.spark.replay import replay_spark
    from cachesync.consumer.spark.session import spark_session
    from cachesync.runtime.kafka_security import spark_kafka_options
    with spark_session("cachesync-replay", master) if spark is None else nullcontext(spark) as session:
        # Tasks run at most defaultParallelism at a time: each gets its share of the rate.
        per_task = rate / session.sparkContext.defaultParallelism if rate else None
        config = ReplayConfig(mappings, None if dry_run else SettingsAdapters(settings), tables,
                              per_task, settings.consumer.batch_size)
        return replay_spark(session, settings.kafka.bootstrap_servers, settings.kafka.topic,
                            ranges, config, progress, kafka_options=spark_kafka_options(settings.kafka))


def render_table(report) -> str:
    kind = "dry run: would delete" if report.dry_run else "deleted"
    lines = [f"replay ({report.engine}, {kind}) of {report.records} records in "
             f"{report.elapsed_s:.1f}s ({report.events_per_s:,.0f} records/s); "
             f"{report.poison} poison skipped; {report.keys_existed} keys existed",
             f"{'table':<40} {'events':>10} {'keys':>10}"]
    for table, n in report.tables.items():
        lines.append(f"{table:<40} {n['events']:>10} {n['keys']:>10}")
    return "\n".join(lines)
