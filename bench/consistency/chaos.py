"""The kill class's fault injector: kills and restarts cachesync's processes and the broker.

As the chaos tests do, on the real processes: ``tail`` and ``consume`` get SIGKILL and a
replacement is started at once; the Kafka broker is stopped and started with
``devstack/stack.sh down|up kafka``. Each fault is an outage window, from the kill (the start
of ``stack.sh down kafka``) until the component is up and serving again: the replacement
cachesync process answers ``/readyz`` with 200, or the restarted broker acknowledged
(acks=all) a record a new client produced to the lab's probe topic. ``stack.sh up kafka`` runs
with ``DEVSTACK_KAFKA_PORT_ONLY=1``: its own metadata and topic checks would start two JVM
admin tools (about 2 CPU-seconds each) in the seconds the backlog drains, which a deployment's
broker restart does not; the next fault waits for it to return. Faults follow one another
every ``interval_s``, a new one no sooner than RECOVERY_S after the last outage ended (a kill
at the end of a broker outage would cut into its recovery and blur both), until ``stop``; the
cycle goes on where the previous cell's injector left it.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

from bench.common import log, wait_for
from bench.failover import first_produce, _port_open, _stack_sh_args, _stack_sh_env

FAULTS = ("consume", "tail", "kafka")     # the cycle, in this order
# the next fault starts at least this long after the last outage ended: each outage's recovery
# (its backlog draining) is measured on its own, not cut short by the next kill
RECOVERY_S = 5.0
READY_TIMEOUT_S = 180.0


class ChaosInjector(threading.Thread):
    """Kills and restarts in a cycle; ``outages`` is [(what, start, end)] (perf_counter)."""

    def __init__(self, box, procs: dict, configs: dict, interval_s: float,
                 stack_sh, probe_topic: str, first_after_s: float = 5.0, first: int = 0):
        super().__init__(name="chaos", daemon=True)
        self.probe_topic = probe_topic      # the broker serves once a record to it is acked
        self.box, self.procs, self.configs = box, procs, configs
        self.interval_s, self.first_after_s, self.stack_sh = interval_s, first_after_s, stack_sh
        self.stop = threading.Event()
        self.outages: list[tuple[str, float, float]] = []
        self.first = first          # where in the cycle to begin (it goes on across cells)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.stop.wait(self.first_after_s):
                return
            n = self.first
            while not self.stop.is_set():
                what = FAULTS[n % len(FAULTS)]
                start = time.perf_counter()
                end = self._kafka() if what == "kafka" else self._kill(what)
                self.outages.append((what, start, end))
                log(f"consistency: {what} down for {end - start:.1f} s")
                n += 1
                now = time.perf_counter()
                if self.stop.wait(max(0.0, self.interval_s - (now - start),
                                      RECOVERY_S - (now - end))):
                    return
        except BaseException as e:  # noqa: BLE001 - raised by check() in the lab's thread
            self.error = e

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the fault injector failed: {self.error}") from self.error

    def _kill(self, command: str) -> float:
        """Kill -9 and start a replacement; returns when it answered /readyz."""
        old = self.procs[command]
        old.send_signal(signal.SIGKILL)
        old.wait(30)
        new = self.box.spawn(command, self.configs[command])
        self.procs[command] = new
        await_ready(self.box, new)
        return time.perf_counter()

    def _kafka(self) -> float:
        """Stop and start the broker; returns when it first acknowledged a produce."""
        stack = self.box.stack
        self.stack_sh(stack, "down", "kafka")
        # no JVM admin tools beside the broker (its own checks: 2 CPU-seconds each, in the
        # seconds the backlog drains); the produce below is the check that it serves
        up = subprocess.Popen(_stack_sh_args("up", "kafka"),
                              env={**_stack_sh_env(stack), "DEVSTACK_KAFKA_PORT_ONLY": "1"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # the port first (a client started against a closed port fails at once, in a loop)
        wait_for(lambda: _port_open(stack.bootstrap), READY_TIMEOUT_S, "the broker's port",
                 interval=0.05)
        served = first_produce(stack.bootstrap, self.probe_topic)
        _, err = up.communicate(timeout=READY_TIMEOUT_S)
        if up.returncode != 0:
            raise RuntimeError(f"stack.sh up kafka failed: {err[-2000:]}")
        return served


def await_ready(box, proc) -> None:
    """Until the process's /readyz answers 200 (its metrics listen on a free port)."""
    def address():
        if proc.poll() is not None:
            raise RuntimeError(f"a restarted cachesync process exited:\n{box.proc_log(proc)}")
        m = re.search(r"metrics and health on http://(\S+) ", box.proc_log(proc, 100_000))
        return m and m.group(1)
    addr = wait_for(address, READY_TIMEOUT_S, "a restarted process's metrics address",
                    interval=0.05)

    def ready():
        try:
            with urllib.request.urlopen(f"http://{addr}/readyz", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, json.JSONDecodeError):
            return False
    wait_for(ready, READY_TIMEOUT_S, "a restarted process to be ready", interval=0.05)
