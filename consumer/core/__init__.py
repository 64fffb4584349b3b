"""The consumer's decisions as pure functions: no I/O imports (a test enforces it)."""

from consumer.core.dedup import ClaimState, Decision, decide
from consumer.core.offsets import Record, commit_offsets
from consumer.core.plan import EventPlan, Plan, plan_batch
from consumer.core.retry import RetryPolicy

__all__ = ["ClaimState", "Decision", "decide", "Record", "commit_offsets",
           "EventPlan", "Plan", "plan_batch", "RetryPolicy"]
