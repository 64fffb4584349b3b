"""Which ``CACHESYNC_*`` environment variables are settings, which are not, and which are
Kubernetes' own.

A variable of the settings' form, ``CACHESYNC_<SECTION>_<FIELD>`` (or ``..._FILE``) with a
real section, must name a field: a typo there is refused like an unknown YAML field
instead of being ignored. The project's other variables are listed once, in
:data:`OTHER_VARIABLES`, and accepted. Kubernetes injects ``<SERVICE>_SERVICE_HOST``,
``<SERVICE>_PORT=tcp://...`` and friends for every Service in the namespace (a Service
named ``cachesync-mysql`` gives ``CACHESYNC_MYSQL_PORT=tcp://10.0.0.7:3306``): those are
recognised by their form and never read as settings.
"""

from __future__ import annotations

import difflib
import re
from typing import Mapping

ENV_PREFIX = "CACHESYNC_"

# Every CACHESYNC_ variable that is not a setting, with what it does. A new one goes here.
OTHER_VARIABLES = {
    "CACHESYNC_CONFIG": "the YAML settings file (--config)",
    "CACHESYNC_ENV_FILE": "a KEY=VALUE file loaded into the environment first (--env-file)",
    "CACHESYNC_DEVSTACK_DIR": "where devstack/stack.sh keeps its servers' data and env file",
    "CACHESYNC_SPARK_MASTER": "the Spark master URL (--spark-master)",
    "CACHESYNC_SPARK_CHECKPOINT": "the Spark query's checkpoint location (--checkpoint-location)",
    "CACHESYNC_SPARK_JARS_DIR": "where the Spark Kafka connector jars are",
    "CACHESYNC_SPARK_EXECUTOR_PYTHON": "the executors' Python (spark-submit --executor-python)",
    "CACHESYNC_SPARK_TRIGGER": "the Spark query's trigger (consume --engine spark --trigger)",
    "CACHESYNC_PURE": "=1 builds the pure-Python wheel, without the C accelerator (setup.py)",
    "CACHESYNC_NO_SPEEDUPS": "=1 switches the C accelerator off: every compiled path (the "
                             "tailer's rows, the consumer's keys, the event decoder, the "
                             "partitioner) takes its pure-Python twin, with the same results, "
                             "and kafka.client auto takes kafka-python",
    "CACHESYNC_SHARED": "the folder of binlogs and bytes other projects recorded, which the "
                        "tests and benchmarks read (default: the checkout's ../shared)",
}

# Kubernetes service links of a Service whose {SVC}_SERVICE_HOST is set: {SVC}_SERVICE_PORT[_{NAME}],
# {SVC}_PORT=tcp://ip:port, {SVC}_PORT_{N}_{PROTO}[_PROTO|_PORT|_ADDR]
_LINK_SUFFIX = re.compile(r"SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?"
                          r"|PORT_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?")
_LINK_URL = re.compile(r"(tcp|udp|sctp)://\S+:\d+")


def service_links(environ: Mapping[str, str]) -> set[str]:
    """The ``CACHESYNC_*`` names in ``environ`` that Kubernetes set for a Service: their form
    matches and the Service's ``_SERVICE_HOST`` is there too. A bare ``..._PORT`` counts only
    with a ``tcp://host:port`` value, so ``CACHESYNC_MYSQL_PORT=3306`` stays a setting."""
    services = [n[:-len("_SERVICE_HOST")] for n in environ if n.endswith("_SERVICE_HOST")]
    return {name for name, value in environ.items() if name.startswith(ENV_PREFIX)
            and any(name.startswith(svc + "_") and _is_link(name[len(svc) + 1:], value)
                    for svc in services)}


def _is_link(suffix: str, value: str) -> bool:
    if suffix == "PORT":
        return bool(_LINK_URL.fullmatch(value))
    return bool(_LINK_SUFFIX.fullmatch(suffix))


def unknown_variables(environ: Mapping[str, str], sections: Mapping[str, list[str]]) -> list[str]:
    """A problem for each variable of the form ``CACHESYNC_<SECTION>_<X>`` whose ``X`` is no
    field of that section (nor a field with ``_FILE``), naming the closest field."""
    links = service_links(environ)
    problems = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in OTHER_VARIABLES or name in links:
            continue
        section, _, rest = name[len(ENV_PREFIX):].partition("_")
        known = sections.get(section.lower())
        if known is None or not rest:
            continue
        field = rest.lower()
        if field in known or (field.endswith("_file") and field[:-5] in known):
            continue
        problems.append(f"environment {name}: no setting {section.lower()}.{field}"
                        f"{_closest(field.removesuffix('_file'), known)}; {section.lower()} has {sorted(known)}")
    return problems


def _closest(field: str, known: list[str]) -> str:
    match = difflib.get_close_matches(field, known, n=1)
    return f" (did you mean {match[0]}?)" if match else ""
