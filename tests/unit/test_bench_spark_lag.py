"""The Spark lag benchmark's trigger choices (bench.spark_lag): checked as ``--trigger`` is."""

from __future__ import annotations

import pytest

from bench.spark_lag import DEFAULT, _triggers


def test_the_default_trigger_alone_when_nothing_is_asked():
    assert _triggers("") == [DEFAULT]
    assert _triggers(DEFAULT) == [DEFAULT]


def test_several_triggers_run_in_the_order_asked():
    assert _triggers("default, 200ms,0") == [DEFAULT, "200ms", "0"]


def test_a_trigger_the_consumer_would_refuse_fails_before_anything_starts():
    with pytest.raises(ValueError, match="availableNow or an interval"):
        _triggers("default,soon")
