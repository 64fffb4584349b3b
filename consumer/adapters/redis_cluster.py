"""What the Redis adapters do differently on a Redis Cluster (``redis.cluster``).

A cluster takes a multi-key command or a script only when all its keys hash to one slot
(else CROSSSLOT), and SCAN sees one node's keys. So the adapters group keys per slot
(schema.slots; a single server gets one group), pipeline the groups (redis-py's cluster
pipeline sends each node its commands and follows MOVED/ASK), and SCAN every primary.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import redis
from redis.cluster import RedisCluster

from cachesync.schema.slots import key_slot


def is_cluster(client) -> bool:
    return isinstance(client, RedisCluster)


def read_cached(client, mapping, keys: list) -> list:
    """What Redis holds at ``keys`` of ``mapping``, in order: a dict per key for update-mode
    hashes (HGETALL, pipelined), else bytes or None (MGET; per slot on a cluster)."""
    if mapping.updates and mapping.value_format == "hash":
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        return pipe.execute()
    return mget(client, keys)


def mget(client, keys: list) -> list:
    """The values at ``keys`` (on a cluster per node, not one atomic MGET: an MGET there
    takes keys of one slot only)."""
    return client.mget_nonatomic(keys) if is_cluster(client) else client.mget(keys)


def per_slot(items: Sequence, cluster: bool, key: Callable = lambda item: item) -> Iterable[list]:
    """``items`` in lists that one multi-key command or script may take: per hash slot of
    ``key(item)`` on a cluster (in first-seen order), else all of them."""
    if not cluster:
        return [list(items)] if items else []
    groups: dict[int, list] = {}
    for item in items:
        groups.setdefault(key_slot(key(item)), []).append(item)
    return list(groups.values())


def masters(client) -> list:
    """The servers to SCAN: a client of each primary of a cluster, else the client itself."""
    if not is_cluster(client):
        return [client]
    return [client.get_redis_connection(node) for node in client.get_primaries()]


def queue_script(pipe, script, keys: Sequence, args: Sequence) -> None:
    """Queue EVALSHA of a redis-py Script: a cluster pipeline refuses ``script(client=pipe)``
    (its evalsha method is blocked); its execute_command routes by the keys' slot."""
    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)


def queue_unlink(pipe, keys: Sequence) -> None:
    """Queue one UNLINK of ``keys`` (of one slot on a cluster, whose pipeline's unlink
    method takes a single key)."""
    pipe.execute_command("UNLINK", *keys)


def run_pipeline(client, fill: Callable[[object], None], scripts: Sequence = ()) -> list:
    """Queue ``fill(pipe)`` on a non-transactional pipeline and execute it.

    Scripts go as EVALSHA (queue_script), and a server forgets them when it restarts or
    fails over: on NOSCRIPT the ``scripts`` are loaded (on every primary of a cluster) and
    the pipeline runs once more (every command the adapters queue is idempotent). Raises
    redis errors.
    """
    pipe = client.pipeline(transaction=False)
    fill(pipe)
    try:
        return pipe.execute()
    except redis.exceptions.NoScriptError:
        for script in scripts:
            script.sha = client.script_load(script.script)
        pipe = client.pipeline(transaction=False)
        fill(pipe)
        return pipe.execute()
