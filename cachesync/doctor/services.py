"""Redis and clock checks, and the first start over a filled cache (a bounded SCAN sample)."""

from __future__ import annotations

import time

from cachesync.runtime.config import Settings
from cachesync.doctor.check import FAIL, MAX_SKEW_S, PASS, WARN, Check


def redis_check(settings: Settings, client) -> list[Check]:
    """Reachable, writable (a master), its mode, and its clock."""
    info = client.info()
    mode = "cluster" if settings.redis.cluster else (
        "sentinel" if settings.redis.sentinels else info.get("redis_mode", "standalone"))
    role = info.get("role", "?")
    out = []
    if role != "master":
        out.append(Check("redis", FAIL, f"Redis answers as a {role}: writes are refused",
                         "point redis.url at the master (or use redis.sentinels)"))
    else:
        out.append(Check("redis", PASS, f"{mode}, {role}, version {info.get('redis_version')}, "
                         f"maxmemory-policy {info.get('maxmemory_policy', '?')}"))
    seconds, micros = client.time()
    out.append(skew_check("redis", seconds + micros / 1e6, time.time()))
    return out


def mysql_clock(connect) -> float:
    conn = connect(database=None)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT UNIX_TIMESTAMP(NOW(6))")
            return float(cur.fetchone()[0])
    finally:
        conn.close()


def skew_check(what: str, theirs: float, ours: float) -> Check:
    skew = theirs - ours
    if abs(skew) > MAX_SKEW_S:
        return Check("clock-skew", WARN, f"{what}'s clock is {skew:+.2f} s from this host's: lag "
                     "figures and lease expiries are off by as much", "run NTP (chrony) on both")
    return Check("clock-skew", PASS, f"{what} {skew:+.3f} s")


SAMPLE_SCAN_CALLS = 10      # SCAN calls per template and node: a bounded sample, never all keys
SAMPLE_SCAN_COUNT = 1000


def first_start_check(settings: Settings, has_checkpoint: bool, client) -> Check:
    """On a first start (no checkpoint), keys the mapping renders already in Redis were
    cached before cachesync watched: they may be stale until `cachesync resync`."""
    if has_checkpoint:
        return Check("first-start", PASS, f"tailer {settings.tailer.name} has a checkpoint")
    templates = {t.glob: t.text for m in settings.tables.entries for t in m.keys}
    for glob, text in templates.items():
        found = sample_keys(client, glob)
        if found:
            return Check("first-start", WARN, f"first start of tailer {settings.tailer.name}, "
                         f"but Redis already holds mapped keys (e.g. {found[0]!r} of {text!r}): "
                         "they were cached before cachesync watched and may be stale",
                         "stop writers' caching or accept misses, then run `cachesync resync` "
                         "before `cachesync tail`")
    return Check("first-start", PASS, "first start; no mapped key found in a sample of Redis")


def sample_keys(client, glob: str) -> list[str]:
    """Keys matching ``glob`` among a bounded number of SCAN steps of each master."""
    nodes = ([client.get_redis_connection(n) for n in client.get_primaries()]
             if hasattr(client, "get_primaries") else [client])
    for node in nodes:
        cursor = 0
        for _ in range(SAMPLE_SCAN_CALLS):
            cursor, keys = node.scan(cursor, match=glob, count=SAMPLE_SCAN_COUNT)
            if keys:
                return [k.decode("utf-8", "replace") if isinstance(k, bytes) else k for k in keys]
            if not cursor:
                break
    return []


def has_checkpoint(connect, settings: Settings) -> bool:
    conn = connect(database=None)
    try:
        with conn.cursor() as cur:
            try:
                cur.execute(f"SELECT 1 FROM `{settings.mysql.state_db}`.cachesync_checkpoint "
                            "WHERE name = %s", (settings.tailer.name,))
                return cur.fetchone() is not None
            except Exception:       # no state database yet: nothing has run
                return False
    finally:
        conn.close()
