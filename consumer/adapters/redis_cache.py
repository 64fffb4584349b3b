"""Redis cache writer: pipelined deletes, errors classified as retryable."""

from __future__ import annotations

from typing import Sequence

import redis

from consumer.ports import chunks
from schema.errors import FatalError, RetryableError
from schema.keys import lease_key

# Keys per pipeline round trip: large enough to amortise the RTT, small enough
# that one slow batch does not hold Redis for long.
PIPELINE_CHUNK = 2000


class RedisCache:
    def __init__(self, url: str, client: redis.Redis | None = None):
        self._client = client or redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)

    def delete(self, keys: Sequence[str]) -> int:
        """UNLINK keys and their fill leases; raises RetryableError when Redis is unreachable.

        Deleting the lease voids any read_through fill that started before this
        invalidation, so a reader that loaded the old row cannot write it back.
        Returns how many cache keys (not leases) existed.
        """
        existed = 0
        try:
            for part in chunks(list(keys), PIPELINE_CHUNK // 2):
                pipe = self._client.pipeline(transaction=False)
                pipe.unlink(*part)
                pipe.unlink(*(lease_key(k) for k in part))
                existed += int(pipe.execute()[0])
        except redis.AuthenticationError as e:
            raise FatalError(f"Redis refused the credentials: {e}") from e
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as e:
            raise RetryableError(f"Redis unavailable: {e}") from e
        return existed

    def close(self) -> None:
        self._client.close()
