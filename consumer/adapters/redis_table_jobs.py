"""The state of table-level scans in Redis, shared by a consumer group's processes: one scan
per table-level event, however many partition copies and consumers see it."""

from __future__ import annotations

import redis

from cachesync.consumer.adapters.redis_cache import redis_call
from cachesync.consumer.core.table_jobs import JobState
from cachesync.schema import resource_text
from cachesync.schema.keys import table_job_key

WHAT = "Redis (table-level scans)"


class RedisTableJobs:
    """``begin`` / ``renew`` / ``finish`` of one scan (schema/lua/table_job.lua); every
    record lives ``keep_s`` (the dedup retention), so a copy delivered again within it finds
    the scan done."""

    def __init__(self, client: redis.Redis, namespace: str, keep_s: float):
        self._client, self._ns = client, namespace
        self._keep_ms = max(1, int(keep_s * 1000))
        self._script = client.register_script(resource_text("lua/table_job.lua"))

    def begin(self, job: str, owner: str, lease_s: float) -> tuple[JobState, int]:
        """Whether to run, wait for or skip the scan, and (done) the keys it removed."""
        state, removed = redis_call(lambda: self._run(job, "begin", owner, _ms(lease_s)), WHAT)
        return JobState(state.decode() if isinstance(state, bytes) else state), int(removed)

    def renew(self, job: str, owner: str, lease_s: float) -> bool:
        return bool(redis_call(lambda: self._run(job, "renew", owner, _ms(lease_s)), WHAT))

    def finish(self, job: str, owner: str, removed: int) -> None:
        redis_call(lambda: self._run(job, "finish", owner, removed), WHAT)

    def _run(self, job: str, op: str, owner: str, value: int):
        return self._script(keys=[table_job_key(self._ns, job)],
                            args=[op, owner, value, self._keep_ms])

    def close(self) -> None:
        self._client.close()


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
