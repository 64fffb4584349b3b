"""The consumer's decisions as pure functions: no I/O imports (a test enforces it)."""

from cachesync.consumer.core.dedup import ClaimState, Decision, decide
from cachesync.consumer.core.offsets import Record, commit_offsets
from cachesync.consumer.core.plan import EventPlan, Plan, plan_batch

__all__ = ["ClaimState", "Decision", "decide", "Record", "commit_offsets",
           "EventPlan", "Plan", "plan_batch"]
