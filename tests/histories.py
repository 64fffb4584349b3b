"""Random histories of one row, for the fencing property tests (unit and real Redis).

A history is the row's committed changes in order (inserts, updates that may move
its email key, deletes), as ChangeEvents with growing versions. Whatever order and
duplication the events arrive in, the cache must end in the state the last event
left: the final row's keys hold the final row, every other key is absent.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

from cachesync.schema.event import ChangeEvent, Source
from cachesync.schema.mapping import parse_mappings

TABLE = "shop.users"


def mappings(prefix: str = "", value: str = "json"):
    return parse_mappings({TABLE: {"keys": [f"{prefix}user:{{id}}", f"{prefix}user:email:{{email}}"],
                                   "mode": "update", "value": value}})


@st.composite
def histories(draw, max_len: int = 12):
    """A list of ChangeEvents for row id=7; versions grow with the list index."""
    n = draw(st.integers(1, max_len))
    events, row = [], None
    for i in range(n):
        if row is None:
            op, before = "insert", None
        else:
            op, before = draw(st.sampled_from(["update", "update", "delete"])), row
        if op == "delete":
            after = None
        else:
            after = {"id": 7, "email": draw(st.sampled_from(["a@x", "b@x", "c@x"])),
                     "name": f"n{i}"}
        events.append(ChangeEvent(f"m{i}", Source("binlog", "s", f"0-1-{i + 1}", 0.0), "shop",
                                  "users", op, (("id", 7),), before, after, version=i + 1))
        row = after
    return events


@st.composite
def deliveries(draw, max_len: int = 12):
    """(history, the events as delivered: shuffled, some duplicated, cut into batches)."""
    history = draw(histories(max_len))
    extra = draw(st.lists(st.sampled_from(history), max_size=len(history)))
    delivered = draw(st.permutations(history + extra))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(delivered) - 1)), max_size=4)))
    batches, start = [], 0
    for cut in [*cuts, len(delivered)]:
        if cut > start:
            batches.append(delivered[start:cut])
            start = cut
    return history, batches


def expected_state(history, prefix: str = "") -> dict[str, dict]:
    """Key -> decoded JSON value after the whole history; keys not listed must be absent."""
    final = history[-1].after
    if final is None:
        return {}
    return {f"{prefix}user:7": final, f"{prefix}user:email:{final['email']}": final}


def all_keys(prefix: str = "") -> list[str]:
    return [f"{prefix}user:7"] + [f"{prefix}user:email:{e}" for e in ("a@x", "b@x", "c@x")]


def decode_values(values: dict) -> dict[str, dict]:
    return {k: json.loads(v) for k, v in values.items() if v is not None}
