"""bench.head_cost's configuration syntax (pure): the runs themselves are in
tests/integration/test_bench_head_cost.py."""

from __future__ import annotations

import pytest

from bench import head_cost


def test_configurations_split_on_commas_outside_their_settings():
    text = "tail+consume@librdkafka{tailer.publisher=thread,tailer.pack_rows=1}, run,run --direct{a.b=2}"
    assert head_cost.configs(text) == ("tail+consume@librdkafka{tailer.publisher=thread,tailer.pack_rows=1}",
                                       "run", "run --direct{a.b=2}")
    assert head_cost._parse(head_cost.configs(text)[0]) == (
        "tail+consume", "librdkafka",
        {"CACHESYNC_TAILER_PUBLISHER": "thread", "CACHESYNC_TAILER_PACK_ROWS": "1"})


def test_a_setting_may_be_json_with_braces_of_its_own():
    text = 'run{kafka.producer_properties={"linger_ms":0,"acks":"all"},tailer.publisher=thread},run'
    assert head_cost.configs(text) == (text[:-4], "run")
    assert head_cost._parse(text[:-4])[2] == {
        "CACHESYNC_KAFKA_PRODUCER_PROPERTIES": '{"linger_ms":0,"acks":"all"}',
        "CACHESYNC_TAILER_PUBLISHER": "thread"}


def test_a_setting_without_a_section_is_an_error():
    with pytest.raises(ValueError, match="section.key=value"):
        head_cost._parse("run{pack_rows=1}")
