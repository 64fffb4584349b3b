"""What every check returns: a level (PASS, NOTE, WARN, FAIL), what was found and the fix.

NOTE is what a new pipeline is expected to show (no consumer group yet, topics that
`kafka.create_topics` makes at start): nothing to fix, so it exits 0 like PASS and
`cachesync doctor && cachesync run` works on a first start. WARN (exit 5) runs but needs
attention; FAIL (exit 6) will not work.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

PASS, NOTE, WARN, FAIL = "PASS", "NOTE", "WARN", "FAIL"
LEVELS = {PASS: 0, NOTE: 1, WARN: 2, FAIL: 3}
EXIT_CODES = {PASS: 0, NOTE: 0, WARN: 5, FAIL: 6}
MAX_SKEW_S = 1.0           # clocks further apart than this skew lag figures and leases
GRANT_LINE = "the cachesync user lacks"     # how preflight.problems names a missing grant


@dataclass(frozen=True)
class Check:
    name: str
    level: str           # PASS | NOTE | WARN | FAIL
    detail: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.level:<4} {self.name:<18} {self.detail}" + (
            f"\n     {'':<18} fix: {self.fix}" if self.fix else "")

    def to_dict(self) -> dict:
        return asdict(self)


def worst(checks: list[Check]) -> str:
    return max((c.level for c in checks), key=LEVELS.__getitem__, default=PASS)


def guard(name: str, run: Callable[[], list[Check]]) -> list[Check]:
    try:
        return run()
    except Exception as e:        # an unreachable service is a finding, not a crash
        return [Check(name, FAIL, f"{type(e).__name__}: {e}",
                      f"check that {name} is reachable with the configured address and credentials")]
