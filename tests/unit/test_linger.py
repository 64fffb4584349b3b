"""Linger: the wait after an arrival while arrivals come close together, shortened by
``enough`` to the time that much takes to arrive at the pace of the last two."""

from __future__ import annotations

import pytest

from cachesync.runtime.linger import Linger
from tests.support.clock import FakeClock


def paced(enough: int = 0) -> tuple[Linger, FakeClock]:
    clock = FakeClock()
    return Linger(0.015, 0.030, clock, clock.sleep, enough=enough), clock


@pytest.mark.parametrize("gap_s, size, wait_s", [
    (0.015, 250, 0.015),        # 100 commits/s: 250 bytes per 10 ms; 4 KB would take 240 ms
    (0.015, 3750, 0.015),       # 1,000/s: 4 KB takes 16.4 ms, more than the linger
    (0.015, 11250, 0.005461),   # 3,000/s: 4 KB in 5.5 ms
    (0.005, 3750, 0.005461),    # the same pace seen over a shorter gap: the same wait
])
def test_enough_shortens_the_wait_to_the_time_it_takes_to_arrive(gap_s, size, wait_s):
    linger, clock = paced(enough=4096)
    linger.arrived(True, 100)
    clock.now += gap_s
    linger.arrived(True, size)
    assert linger.remaining() == pytest.approx(wait_s, abs=1e-6)
    clock.now += 0.001
    assert linger.remaining() == pytest.approx(max(0.0, wait_s - 0.001), abs=1e-6)


def test_without_enough_or_size_the_wait_is_the_linger():
    for linger, clock in (paced(), paced(enough=4096)):
        linger.arrived(True)
        clock.now += 0.002
        linger.arrived(True)                    # no size: the whole linger
        assert linger.remaining() == pytest.approx(0.015)


def test_arrivals_far_apart_or_not_counted_never_wait():
    linger, clock = paced(enough=4096)
    linger.arrived(True, 250)
    clock.now += 0.031                          # beyond close_s
    linger.arrived(True, 250)
    assert linger.remaining() == 0.0 and linger.alone
    clock.now += 0.001
    linger.arrived(False, 250_000)              # a full read (from behind): never waits
    assert linger.remaining() == 0.0 and not linger.alone
