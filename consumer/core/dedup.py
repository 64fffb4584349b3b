"""Idempotent-receiver decisions over the dedup store's answer for a batch of ids."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Mapping


class ClaimState(enum.Enum):
    OWNED = "owned"      # we hold the claim now: apply, then confirm
    DONE = "done"        # applied before: skip, it is a duplicate
    BUSY = "busy"        # someone else holds a live lease: wait for it to expire


@dataclass(frozen=True)
class Decision:
    apply: tuple[str, ...]
    duplicates: tuple[str, ...]
    busy: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """True when every id is either applied by us or already done."""
        return not self.busy


def decide(ids: Iterable[str], states: Mapping[str, ClaimState]) -> Decision:
    """Split ids by claim state, in input order; an id missing from ``states`` is BUSY.

    Missing means the store could not confirm our claim, and treating it as busy
    (retry later) is the only choice that neither loses nor double-counts it.
    """
    apply, dup, busy = [], [], []
    for msg_id in dict.fromkeys(ids):
        state = states.get(msg_id, ClaimState.BUSY)
        (apply if state is ClaimState.OWNED else dup if state is ClaimState.DONE else busy).append(msg_id)
    return Decision(tuple(apply), tuple(dup), tuple(busy))
