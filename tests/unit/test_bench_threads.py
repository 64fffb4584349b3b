"""bench.threads: CPU per thread of a process tree, named by the Python thread names."""

from __future__ import annotations

import subprocess
import sys

from bench.threads import ThreadClock, median_threads, py_spy, scaled


def has_py_spy() -> bool:
    return py_spy() is not None

CHILD = """
import sys, threading, time
def spin():
    while time.thread_time() < 0.2:      # 0.2 s of this thread's CPU, however busy the host
        pass
    print("spun", flush=True)
    threading.Event().wait()        # alive until the process ends: its time stays readable
sys.stdin.readline()
threading.Thread(target=spin, name="cachesync-spin", daemon=True).start()
sys.stdin.readline()
"""


def clocked(script: str, done: str):
    """ThreadClock.read() of a child running ``script`` from its first line of stdin until it
    prints ``done``."""
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        clock = ThreadClock({"child": child.pid})
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == done + "\n"
        return clock.read()
    finally:
        child.stdin.close()
        child.wait(10)


def test_the_busy_thread_is_named_and_measured_in_its_process():
    seconds, _ = clocked(CHILD, "spun")
    threads = seconds["child"]
    assert sum(threads.values()) >= 0.2, threads
    if has_py_spy():
        assert threads["cachesync-spin"] >= 0.19, threads


def test_scaled_and_median():
    assert scaled({"p": {"a": 0.5}}, 1e6 / 1000, 1) == {"p": {"a": 500.0}}
    assert median_threads([{"p": {"a": 1.0, "b": 4.0}}, {"p": {"a": 3.0}}]) == \
        {"p": {"b": 2.0, "a": 2.0}}


NAPPER = """
import sys, threading, time
def nap():
    for _ in range(50):              # 50 sleeps: 50 wake-ups at least
        time.sleep(0.002)
    print("napped", flush=True)
    threading.Event().wait()
sys.stdin.readline()
threading.Thread(target=nap, name="cachesync-nap", daemon=True).start()
sys.stdin.readline()
"""


def test_each_wake_up_of_a_thread_is_counted():
    _, wakes = clocked(NAPPER, "napped")
    assert sum(wakes["child"].values()) >= 50, wakes
    if has_py_spy():
        assert wakes["child"]["cachesync-nap"] >= 50, wakes
