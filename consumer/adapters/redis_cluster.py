"""What the Redis adapters do differently on a Redis Cluster (``redis.cluster``).

A cluster takes a multi-key command or a script only when all its keys hash to one slot
(else CROSSSLOT), and SCAN sees one node's keys. So the adapters group keys per slot
(schema.slots; a single server gets one group), pipeline the groups (redis-py's cluster
pipeline sends each node its commands and follows MOVED/ASK), and SCAN every primary.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import logging
from dataclasses import dataclass

import redis
from redis.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import RedisClusterException

from cachesync.schema.slots import key_slot

log = logging.getLogger(__name__)


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
    (its evalsha method is blocked).

    On a cluster the call names the master of its keys' slot. Left to itself, redis-py's
    cluster pipeline asks its default node for a script's keys (COMMAND GETKEYS): one more
    round trip per call, and once that node is dead (a master lost) every later pipeline
    fails on it, as the pipeline never picks another default node. A slot that moved is
    still followed (MOVED, ASK, then routed by slot).
    """
    options = {"target_nodes": pipe.get_node_from_key(keys[0])} if (
        keys and isinstance(pipe, ClusterPipeline)) else {}
    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args, **options)


def queue_unlink(pipe, keys: Sequence) -> None:
    """Queue one UNLINK of ``keys`` (of one slot on a cluster, whose pipeline's unlink
    method takes a single key)."""
    pipe.execute_command("UNLINK", *keys)


@dataclass(frozen=True)
class ReplicaWait:
    """``redis.wait_replicas``: after a pipeline, WAIT until ``replicas`` replicas of each
    master it wrote to acknowledged it, for at most ``timeout_ms``."""
    replicas: int
    timeout_ms: int


def run_pipeline(client, fill: Callable[[object], None], scripts: Sequence = (),
                 wait: ReplicaWait | None = None) -> list:
    """Queue ``fill(pipe)`` on a non-transactional pipeline and execute it; returns the
    replies of what ``fill`` queued.

    Scripts go as EVALSHA (queue_script), and a server forgets them when it restarts or
    fails over: on NOSCRIPT the ``scripts`` are loaded (on every primary of a cluster) and
    the pipeline runs once more (every command the adapters queue is idempotent). A master
    unreachable makes the cluster's slot map read again (refresh) before the error is
    raised, so the caller's next attempt goes to the replica the cluster promoted. With
    ``wait``, a WAIT follows on each master's connection (queue_wait). Raises redis errors,
    and ReplicaWaitError when too few replicas acknowledged or a WAIT reached a node that is
    a replica now (the slot map is read again first).
    """
    def attempt():
        pipe = client.pipeline(transaction=False)
        fill(pipe)
        queued = len(pipe)
        if wait is not None and queued:
            queue_wait(client, pipe, wait)
        resent = getattr(pipe, "reinitialize_counter", 0)
        replies = pipe.execute()
        if wait is not None:
            if getattr(pipe, "reinitialize_counter", 0) != resent:
                # redis-py re-sent some commands one by one on other connections (MOVED,
                # ASK, a timeout): a WAIT covers only its own connection's writes
                raise ReplicaWaitError(
                    "Redis Cluster re-sent part of the batch after a redirection or a connection "
                    "error, so WAIT cannot vouch for it; the batch is applied again")
            check_wait(replies[queued:], wait)
        return replies[:queued]
    try:
        try:
            return attempt()
        except redis.exceptions.NoScriptError:
            for script in scripts:
                script.sha = client.script_load(script.script)
            return attempt()
    except (redis.ConnectionError, redis.TimeoutError):
        refresh(client)
        raise
    except redis.ResponseError as e:
        if wait is None or WAIT_ON_REPLICA not in str(e):
            raise
        # a node the slot map still calls a master came back from a failover as a replica
        # (a master killed, its replica promoted, the old node restarted): redis-py follows
        # the writes' MOVED, but the WAIT sent to that node fails. The map is read again and
        # the batch applied again, as after any failover
        refresh(client)
        raise ReplicaWaitError(f"a node this client took for a master is a replica now (a "
                               f"failover); the batch is applied again: {e}") from e


# what a replica answers to WAIT
WAIT_ON_REPLICA = "WAIT cannot be used with replica instances"


class ReplicaWaitError(redis.ConnectionError):
    """Fewer replicas than ``redis.wait_replicas`` acknowledged a pipeline in time (a
    ConnectionError: the callers retry it as they retry an unreachable server)."""


def queue_wait(client, pipe, wait: ReplicaWait) -> None:
    """Queue ``WAIT replicas timeout`` after what ``pipe`` holds: on a cluster once per
    master the queued commands go to, each on the connection that carries that master's
    commands (a WAIT covers the writes its own connection sent). A master this pipeline
    does not write to is not asked: one without replicas (just promoted) then holds back
    only the batches that write to it."""
    args = ("WAIT", wait.replicas, wait.timeout_ms)
    if not is_cluster(client):
        pipe.execute_command(*args)
        return
    for node in _written_nodes(client, pipe):
        pipe.execute_command(*args, target_nodes=node)


def _written_nodes(client, pipe) -> list:
    """The masters of what a cluster pipeline holds: a command's ``target_nodes`` (scripts,
    queue_script), else the master of its first key's slot."""
    queue = getattr(getattr(pipe, "_execution_strategy", None), "command_queue", None)
    if queue is None:       # a redis-py without the queue where 8.x keeps it: every master
        return list(client.get_primaries())
    nodes = {}
    for command in queue:
        target = command.options.get("target_nodes")
        node = target if target is not None else client.get_node_from_key(command.args[1])
        nodes[node.name] = node
    return list(nodes.values())


def check_wait(replies: list, wait: ReplicaWait) -> None:
    short = [n for n in replies if isinstance(n, int) and n < wait.replicas]
    if short:
        raise ReplicaWaitError(
            f"only {min(short)} of the {wait.replicas} replica(s) redis.wait_replicas asks for "
            f"acknowledged the writes within {wait.timeout_ms} ms (WAIT); the batch is applied again")


def refresh(client) -> None:
    """Read a cluster's slot map and nodes again (a failover moved slots to a promoted
    replica; the default node may be the master that died). Nothing on a single server; a
    refresh that fails is left to the caller's next attempt."""
    if not is_cluster(client):
        return
    try:
        client.nodes_manager.initialize()
    except (redis.RedisError, RedisClusterException) as e:
        log.info("Redis Cluster: reading the slot map failed (retried with the call): %s", e)
