"""The tailer's Kafka producer in a child process: the same ``KafkaPublisher``, off the GIL.

Its semantics are the in-process publisher's: a record is acknowledged only once Kafka
acknowledged it, flush waits for every record written before it, per-partition order kept. If
the child dies, every record not acknowledged fails with a RetryableError. Why and how:
docs/internals.md, "The publisher in a child process".
"""

from __future__ import annotations

import logging
import pickle
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Mapping

from kafka.errors import KafkaError

from cachesync.runtime.gc_pacing import paced
from cachesync.schema.errors import FatalError, RetryableError

log = logging.getLogger(__name__)

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_ENDED = object()            # what _load returns at the end of the child's output
START_TIMEOUT_S = 120.0      # the child's start: the interpreter, kafka-python, the bootstrap
REPLY_MARGIN_S = 10.0        # a bounded request (flush, close) waits this much longer for its reply
EXIT_STATUS_WAIT_S = 5.0     # after the child's output ends: how long to wait for its exit status
MAX_QUEUED = 10_000          # messages waiting for the writer thread; send() waits beyond it
# a message this long after the one before it, with the writer thread idle and nothing
# queued, is written by its own thread (no hand-off); closer ones are batched by the writer
INLINE_GAP_S = 0.001


class PublisherProcessError(RetryableError):
    """The publisher process is gone; unacknowledged records are re-published on restart."""


class ProcessPublisher:
    """``KafkaPublisher``'s interface (send, partitions, flush, close) over a child process."""

    def __init__(self, bootstrap_servers: str, *, security: Mapping | None = None,
                 child: subprocess.Popen | None = None, **options: Any):
        """Raises what ``KafkaPublisher`` raises (RetryableError: Kafka unreachable,
        FatalError: login refused), or PublisherProcessError if the child cannot start.
        ``child``: this module's process, started earlier with pipes (cachesync.prespawn)."""
        self._proc = child or subprocess.Popen(
            [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            close_fds=True)
        self._out, self._in = self._proc.stdin, self._proc.stdout
        self._write_lock = threading.Lock()
        self._state = threading.Lock()
        self._queued: list[tuple] = []               # messages for the writer thread, in order
        self._queue_ready = threading.Condition(threading.Lock())
        self._writer_idle = False
        self._last_queued = 0.0                      # time.monotonic() of the last message
        self._stopping = False                       # _kill: the writer thread ends
        self._pending: dict[int, tuple[Callable[[], None], Callable[[Exception], None]]] = {}
        self._replies: dict[int, list] = {}          # request id -> [event, ok, value]
        self._seq = 0
        self._dead: PublisherProcessError | None = None
        self._closed = False
        try:
            self._write(("start", bootstrap_servers, security, options, _log_setup()))
            reply = self._read_start()
        except BaseException:
            self._kill()
            raise
        if reply[0] != "ready":
            self._kill()
            raise reply[1]
        self._reader = threading.Thread(target=self._read_loop, name="cachesync-publisher-acks",
                                        daemon=True)
        self._reader.start()
        threading.Thread(target=self._write_loop, name="cachesync-publisher-writes",
                         daemon=True).start()

    def __repr__(self) -> str:
        return f"ProcessPublisher(pid={self._proc.pid})"

    # -- the publisher interface ------------------------------------------------------------
    def send(self, topic: str, key: str, value: bytes, msg_id: str,
             on_ack: Callable[[], None], on_error: Callable[[Exception], None],
             partition: int | None = None, flush: bytes | None = None) -> None:
        seq = self._register(self._pending, (on_ack, on_error))
        self._enqueue(("send", seq, topic, key, value, msg_id, partition, flush))

    def partitions(self, topic: str, timeout_s: float | None = None) -> list[int]:
        """The topic's partition ids, sorted; raises RetryableError without metadata."""
        return self._request("partitions", (topic, timeout_s),
                             wait_s=None if timeout_s is None else timeout_s + REPLY_MARGIN_S)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every record sent before it was acknowledged and its callback ran."""
        self._request("flush", timeout_s,
                      wait_s=None if timeout_s is None else timeout_s + REPLY_MARGIN_S)

    def close(self, timeout_s: float = 10) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._dead is None:
                self._request("close", timeout_s, wait_s=timeout_s + REPLY_MARGIN_S)
        except (RetryableError, KafkaError) as e:
            log.warning("Kafka publisher process did not close cleanly: %s", e)
        finally:
            self._kill(grace_s=5)

    # -- the pipes ------------------------------------------------------------------------
    def _write(self, message: tuple) -> None:
        data = pickle.dumps(message, _PROTOCOL)
        try:
            with self._write_lock:
                self._out.write(data)
                self._out.flush()
        except (OSError, ValueError) as e:
            raise self._gone(f"cannot write to it ({e})",
                             ended=isinstance(e, BrokenPipeError)) from e

    def _enqueue(self, message: tuple) -> None:
        """Queue ``message`` for the writer thread (after every message queued before it),
        or write it here when it comes alone (see the module); waits while MAX_QUEUED are
        waiting."""
        with self._queue_ready:
            while len(self._queued) >= MAX_QUEUED and self._dead is None and not self._stopping:
                self._queue_ready.wait(1.0)
            now = time.monotonic()
            alone, self._last_queued = now - self._last_queued >= INLINE_GAP_S, now
            if not (alone and self._writer_idle and not self._queued and self._dead is None
                    and not self._stopping):
                self._queued.append(message)
                if self._writer_idle:
                    self._queue_ready.notify_all()
                return
            try:
                # under the queue's lock: a message queued after this one cannot overtake it
                self._write(message)
                return
            except PublisherProcessError as e:
                failed = e
        self._fail_all(failed)          # its callbacks may send: not under the queue's lock
        with self._queue_ready:
            self._queue_ready.notify_all()    # the writer thread ends (the child is dead)

    def _write_loop(self) -> None:
        """Write the queued messages, what gathered meanwhile as one ("batch", [...])."""
        while True:
            with self._queue_ready:
                while not self._queued and self._dead is None and not self._stopping:
                    self._writer_idle = True
                    self._queue_ready.wait()
                self._writer_idle = False
                batch, self._queued = self._queued, []
                self._queue_ready.notify_all()           # room for senders waiting
            if not batch:
                return                                   # closed or dead, nothing left
            try:
                self._write(batch[0] if len(batch) == 1 else ("batch", batch))
            except PublisherProcessError as e:
                self._fail_all(e)
                return

    def _request(self, kind: str, arg, wait_s: float | None = None):
        done = threading.Event()
        slot = [done, None, None]
        self._enqueue((kind, self._register(self._replies, slot), arg))
        if not done.wait(wait_s):
            raise RetryableError(f"Kafka publisher process: no answer to {kind} in {wait_s}s")
        ok, value = slot[1], slot[2]
        if not ok:
            raise value
        return value

    def _register(self, table: dict, entry) -> int:
        """A new id for a send's callbacks or a request's reply slot, kept in ``table``;
        raises the error that ended the child, if it has ended."""
        with self._state:
            if self._dead is not None:
                raise self._dead
            self._seq += 1
            table[self._seq] = entry
            return self._seq

    def _read_start(self) -> tuple:
        result: list = []
        reader = threading.Thread(target=lambda: result.append(self._load()), daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        if not result or result[0] is None or result[0] is _ENDED:
            raise self._gone("it did not start", ended=bool(result) and result[0] is _ENDED)
        return result[0]

    def _load(self):
        """The child's next message; ``_ENDED`` when its output ended (it exited or is
        exiting), None when that cannot be read (closed, broken, garbled)."""
        try:
            return pickle.load(self._in)
        except EOFError:
            return _ENDED
        except (OSError, ValueError, pickle.UnpicklingError):   # ValueError: closed
            return None

    def _read_loop(self) -> None:
        why, ended = "it exited", True
        try:
            while True:
                message = self._load()
                if message is _ENDED:
                    return
                if message is None:
                    why, ended = "its output could not be read", False
                    return
                self._dispatch(message)
        except Exception as e:          # a callback failed: no ack can be trusted any more
            why, ended = f"the parent's reader stopped on {type(e).__name__}: {e}", False
            log.exception("Kafka publisher process: an ack callback failed")
        finally:
            self._fail_all(self._gone(why, ended))

    def _dispatch(self, message: tuple) -> None:
        kind = message[0]
        if kind == "ack":
            with self._state:
                acked = [self._pending.pop(seq, None) for seq in message[1]]
            for callbacks in acked:
                if callbacks is not None:
                    callbacks[0]()
        elif kind == "error":
            with self._state:
                callbacks = self._pending.pop(message[1], None)
            if callbacks is not None:
                callbacks[1](message[2])
        else:                          # ("reply", id, ok, value)
            with self._state:
                slot = self._replies.pop(message[1], None)
            if slot is not None:
                slot[1], slot[2] = message[2], message[3]
                slot[0].set()

    def _gone(self, why: str, ended: bool = False) -> PublisherProcessError:
        """The error that ends this publisher; ``ended``: the child's pipes say it exited or
        is exiting. The kernel closes a dying process's pipes before it can be reaped, so
        then its exit status is awaited (up to EXIT_STATUS_WAIT_S) for the error to say how
        it ended."""
        if ended:
            try:
                self._proc.wait(EXIT_STATUS_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        code = self._proc.poll()
        status = f"exit code {code}" if code is not None else "still running"
        error = PublisherProcessError(f"Kafka publisher process (pid {self._proc.pid}, {status}): "
                                      f"{why}; records it had not acknowledged are sent again "
                                      "after a restart")
        with self._state:
            self._dead = self._dead or error
        return error

    def _fail_all(self, error: PublisherProcessError) -> None:
        with self._state:
            pending, self._pending = self._pending, {}
            replies, self._replies = self._replies, {}
        for _on_ack, on_error in pending.values():
            on_error(error)
        for slot in replies.values():
            slot[1], slot[2] = False, error
            slot[0].set()

    def _kill(self, grace_s: float = 0.0) -> None:
        """End the child: its input closed, ``grace_s`` to exit, then SIGKILL. Its output is
        closed last: the reader thread may be blocked reading it (holding its lock) until
        the child is gone."""
        with self._queue_ready:
            self._stopping = True
            self._queue_ready.notify_all()         # the writer thread ends
        _close_quietly(self._out)
        try:
            self._proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        _close_quietly(self._in)


def _log_setup() -> tuple[str, bool, str]:
    """The parent's log level, format and role, for the child's ``cachesync.runtime.logs.setup``."""
    from cachesync.runtime.logs import current_setup
    return current_setup()


def _close_quietly(pipe) -> None:
    try:
        pipe.close()
    except (OSError, ValueError):
        pass


# -- the child ----------------------------------------------------------------------------

def _portable(error: BaseException) -> BaseException:
    """``error`` if it survives pickling (Kafka's errors do), else a KafkaError saying it."""
    try:
        pickle.loads(pickle.dumps(error, _PROTOCOL))
        return error
    except Exception:
        return KafkaError(f"{type(error).__name__}: {error}")


class _Child:
    """Runs the KafkaPublisher. The producer reports acks one record at a time; a writer
    thread sends those that gathered while it wrote the last message as one message, so
    a burst of acks costs the parent one wake-up. Errors and replies go out in order
    after the acks before them."""

    def __init__(self, inp, out):
        self._in, self._out = inp, out
        self._lock = threading.Lock()
        self._acks: list[int] = []
        self._queue: list[tuple] = []
        self._writing = self._broken = False
        self._idle = False                 # the writer thread waits for work
        self._last_ack = 0.0               # time.monotonic() of the last ack
        self._ready = threading.Condition(self._lock)     # the writer's work, and its progress
        self._publisher = None
        threading.Thread(target=self._writer, name="acks-writer", daemon=True).start()

    def ack(self, seq: int) -> None:
        """Queue the ack for the writer thread, or write it here (on the producer's thread)
        when it comes alone while the writer is idle (see the module)."""
        with self._lock:
            now = time.monotonic()
            alone, self._last_ack = now - self._last_ack >= INLINE_GAP_S, now
            if alone and self._idle and not self._queue and not self._acks and not self._broken:
                # under the lock: nothing queued after it is written before it
                self._write(pickle.dumps(("ack", (seq,)), _PROTOCOL))
                if self._broken:
                    self._ready.notify_all()      # the writer thread ends
                return
            self._acks.append(seq)
            self._ready.notify_all()

    def write(self, message: tuple) -> None:
        """Queue ``message`` after the acks gathered so far."""
        with self._lock:
            self._queue_acks()
            self._queue.append(message)
            self._ready.notify_all()

    def _queue_acks(self) -> None:
        """The acks gathered so far as one message at the queue's end (lock held)."""
        if self._acks:
            self._queue.append(("ack", tuple(self._acks)))
            self._acks = []

    def settle(self) -> None:
        """Wait until everything queued was written (before a reply that says so)."""
        with self._lock:
            while (self._queue or self._acks or self._writing) and not self._broken:
                self._ready.wait()

    def _writer(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._acks and not self._broken:
                    self._idle = True
                    self._ready.wait()
                self._idle = False
                if self._broken:
                    return
                self._queue_acks()
                batch, self._queue = self._queue, []
                self._writing = True
            try:
                self._write(b"".join(pickle.dumps(m, _PROTOCOL) for m in batch))
            finally:
                with self._lock:
                    self._writing = False
                    self._ready.notify_all()
            if self._broken:
                return

    def _write(self, data: bytes) -> None:
        """Write to the parent; a parent gone (the main loop sees its input end) marks the
        output broken."""
        try:
            self._out.write(data)
            self._out.flush()
        except (OSError, ValueError):
            self._broken = True

    def run(self) -> int:
        from cachesync.runtime.logs import setup
        from cachesync.producer_outbox.publish.kafka_publisher import new_publisher
        try:
            _kind, bootstrap, security, options, log_setup = pickle.load(self._in)
        except EOFError:
            return 0
        setup(*log_setup)         # the parent's level, format (plain or JSON) and role
        try:
            self._publisher = new_publisher(bootstrap, security=security, **options)
        except Exception as e:      # RetryableError, FatalError, or a setting it refused
            if not isinstance(e, (RetryableError, FatalError, KafkaError)):
                e = FatalError(f"Kafka producer refused its settings: {type(e).__name__}: {e}")
            self.write(("failed", _portable(e)))
            self.settle()
            return 1
        self.write(("ready",))
        self.settle()
        while True:
            try:
                message = pickle.load(self._in)
            except (EOFError, pickle.UnpicklingError):   # the parent is gone (maybe mid-write)
                self._publisher.close(timeout_s=0)
                return 0
            for one in (message[1] if message[0] == "batch" else (message,)):
                if one[0] == "send":
                    self._send(*one[1:])
                elif self._answer(*one):
                    return 0

    def _send(self, seq, topic, key, value, msg_id, partition, flush) -> None:
        try:
            self._publisher.send(topic, key, value, msg_id,
                                 on_ack=lambda: self.ack(seq),
                                 on_error=lambda e: self.write(("error", seq, _portable(e))),
                                 partition=partition, flush=flush)
        except Exception as e:      # raised at once (buffer full, no metadata): that record's error
            self.write(("error", seq, _portable(e)))

    def _answer(self, kind: str, rid: int, arg) -> bool:
        """Run a request and reply; True when it was the last (close)."""
        try:
            if kind == "partitions":
                value = self._publisher.partitions(*arg)
            elif kind == "flush":
                value = self._publisher.flush(arg)
            elif kind == "close":
                value = self._publisher.close(arg)
            else:
                raise ValueError(f"unknown request {kind!r}")
            self.write(("reply", rid, True, value))
        except Exception as e:
            self.write(("reply", rid, False, _portable(e)))
        if kind == "close":
            self.settle()          # the reply is out before the process ends
            return True
        return False


def main() -> int:
    # the parent decides when to stop: it drains, then closes us (signals to the whole
    # process group would otherwise end the producer before the parent's last acks)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with paced():
        return _Child(sys.stdin.buffer, sys.stdout.buffer).run()


if __name__ == "__main__":
    sys.exit(main())
