"""One row of the red team's report: a family of attacks and what each one came to (rejected, contained,
escaped, host-broken, host-hung), shared by every family module (hangs, orphans, channels)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

OUTCOMES = ("rejected", "contained", "escaped", "host-broken", "host-hung")


@dataclass
class Outcome:
    name: str
    outcome: str                 # one of OUTCOMES
    seconds: float = 0.0         # how long the attack took to end (hangs: against its deadline)
    detail: str = ""


@dataclass
class FamilyRow:
    family: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        c = dict.fromkeys(OUTCOMES, 0)
        for o in self.outcomes:
            c[o.outcome] += 1
        return c

    @property
    def tried(self) -> int:
        return len(self.outcomes)

    @property
    def notes(self) -> list[str]:
        return [f"{o.name}: {o.outcome}" + (f" after {o.seconds:.2f}s" if o.seconds else "")
                + (f" ({o.detail})" if o.detail else "") for o in self.outcomes
                if o.outcome not in ("contained", "rejected")]

    @property
    def slowest(self) -> float:
        return max((o.seconds for o in self.outcomes), default=0.0)

    def add(self, attack: str, fn: Callable[[], tuple[str, str]]) -> None:
        """Run one attack that returns (outcome, detail); the host raising is host-broken."""
        try:
            outcome, detail = fn()
        except Exception as e:  # noqa: BLE001 - the host raised: host-broken
            outcome, detail = "host-broken", f"{type(e).__name__}: {str(e)[:200]}"
        self.outcomes.append(Outcome(attack, outcome, 0.0, detail))
