"""The cold-wake benchmark's pure parts: the record it prepares and its clock."""

from __future__ import annotations

import time

from bench import cold_wake


def test_the_prepared_record_is_one_row_change_that_names_both_keys():
    applier, record = cold_wake.one_record()
    prepared = applier.prepare([record])
    assert prepared.decoded.consumed == 1 and not prepared.decoded.undecodable
    (event_plan,) = prepared.plan.events
    assert list(event_plan.keys) == ["item:7", "item:sku:SKU-00000007"]


def test_the_clock_counts_the_work_and_not_the_sleep_before_it():
    def burn():                     # about 2 ms of CPU
        t = time.thread_time()
        while time.thread_time() - t < 0.002:
            pass
    after_a_gap = cold_wake._per_call_us(burn, 0.02, 5)
    assert 2000 <= after_a_gap < 20000          # 20 ms of sleep per call, none of it counted
    assert cold_wake._per_call_us(lambda: None, 0.0, 100) < 2000
