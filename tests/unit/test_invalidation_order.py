"""An invalidation and a read_through fill that races it: the fill must never leave the old
row cached, wherever between the invalidation's commands it lands.

The invalidation is one non-transactional pipeline (RedisCache.delete): other clients'
commands may run between its commands. This records the commands it sends and replays them
against a model of Redis with a fill (lease_fill.lua: write when the lease is the filler's,
then drop the lease) inserted at every point.
"""

from __future__ import annotations

from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.schema.keys import lease_key

KEYS = ["app:user:1", "app:user:2"]
TOKEN = "reader-a"


class Recording:
    """A redis client that records the pipelines' commands (all replies 1)."""

    def __init__(self):
        self.commands: list[tuple] = []

    def pipeline(self, transaction: bool):
        assert not transaction
        return _Pipe(self)

    def register_script(self, text):
        return object()


class _Pipe:
    def __init__(self, owner: Recording):
        self._owner, self._queued = owner, []

    def execute_command(self, *args):
        self._queued.append(args)

    def __len__(self):
        return len(self._queued)

    def execute(self):
        self._owner.commands.extend(self._queued)
        return [1] * len(self._queued)


def run(commands: list[tuple], fill_at: int) -> dict:
    """Redis after ``commands`` with reader A's fill of the old row run before command
    ``fill_at``: A missed, took the lease of each key and read the row before the commit."""
    state = {lease_key(k): TOKEN for k in KEYS}

    def fill():
        for key in KEYS:
            if state.get(lease_key(key)) == TOKEN:
                state[key] = "old row"
                del state[lease_key(key)]
    for n, (name, *keys) in enumerate(commands):
        if n == fill_at:
            fill()
        assert name == "UNLINK"
        for key in keys:
            state.pop(key, None)
    if fill_at == len(commands):
        fill()
    return state


def test_a_fill_of_the_old_row_is_refused_wherever_it_lands_in_the_invalidation():
    client = Recording()
    RedisCache("redis://unused", client=client).delete(KEYS)
    commands = client.commands
    assert {key for _, *keys in commands for key in keys} == {*KEYS, *map(lease_key, KEYS)}
    for fill_at in range(len(commands) + 1):
        state = run(commands, fill_at)
        assert not any(state.get(key) == "old row" for key in KEYS), (
            f"the old row stayed cached with the fill before command {fill_at} of {commands}")


def test_a_fill_before_the_invalidation_is_removed_by_it():
    """(The model's sanity: a fill that lands first is an ordinary cached value, deleted.)"""
    client = Recording()
    RedisCache("redis://unused", client=client).delete(KEYS)
    assert run(client.commands, 0) == {}
