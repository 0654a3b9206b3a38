"""The candidate the search evolves: a router instruction and K_max specialist slots.

A `Library` is plain data: frozen, hashable, JSON-serialisable, with a content hash that is
stable across processes (it is the key of the evaluation cache and of resume). Slot ids are
1-based; 0 always names the frozen fallback program, which is not part of the library.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterator

from dspy_adaptive.program.profiles import declared_profile
from dspy_adaptive.schema import FALLBACK  # noqa: F401 - re-exported: slot id 0 names the fallback

INACTIVE = "INACTIVE"
PROFILES = ("fast", "deep")

DEFAULT_ROUTER = (
    "You route one request to the specialist best able to handle it.\n"
    "Read the request and the numbered descriptions of the active specialists. Answer with the number "
    "of the single specialist whose description covers what the request asks for. Answer 0 when no "
    "specialist clearly fits: 0 sends the request to the general-purpose fallback program."
)


@dataclass(frozen=True)
class Slot:
    """One specialist slot: what it handles (description), how (program source), and its LM profile.

    A source may declare its profile itself (module-level `PROFILE = "fast" | "deep"`, paper Appendix B):
    `activated` and `with_program` then store the declared one, so a program rewrite can change it, and
    `RoutedProgram` runs a declared profile whatever the stored field says (`profiles.effective_profile`).
    """

    description: str = INACTIVE
    program_source: str = ""
    active: bool = False
    profile: str = "fast"

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"Slot.profile must be one of {PROFILES}, got {self.profile!r}")
        for name in ("description", "program_source"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Slot.{name} must be a str, got {type(getattr(self, name)).__name__}")
        if not isinstance(self.active, bool):
            raise TypeError(f"Slot.active must be a bool, got {type(self.active).__name__}")
        if not self.active and self.description != INACTIVE:
            raise ValueError(f"An inactive slot's description must read {INACTIVE!r}")

    def activated(self, description: str, program_source: str, profile: str) -> "Slot":
        if not description.strip() or description.strip() == INACTIVE:
            raise ValueError("An active slot needs a real description")
        profile = declared_profile(program_source)[0] or profile
        return Slot(description=description.strip(), program_source=program_source, active=True, profile=profile)

    def deactivated(self) -> "Slot":
        """Quarantine: description becomes INACTIVE, the program text is kept."""
        return replace(self, active=False, description=INACTIVE)

    def with_program(self, program_source: str) -> "Slot":
        return replace(self, program_source=program_source,
                       profile=declared_profile(program_source)[0] or self.profile)

    def with_description(self, description: str) -> "Slot":
        if not self.active:
            raise ValueError("Only an active slot's description can be rewritten")
        return replace(self, description=description.strip())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Slot":
        unknown = set(data) - {"description", "program_source", "active", "profile"}
        if unknown:
            raise ValueError(f"Unknown Slot fields: {sorted(unknown)}")
        return cls(**data)


@dataclass(frozen=True)
class Library:
    """A router instruction plus `K_max` slots (`slots[0]` is slot 1)."""

    router: str = DEFAULT_ROUTER
    slots: tuple[Slot, ...] = field(default_factory=lambda: tuple(Slot() for _ in range(5)))

    def __post_init__(self) -> None:
        if not isinstance(self.router, str) or not self.router.strip():
            raise ValueError("Library.router must be a non-empty instruction text")
        object.__setattr__(self, "slots", tuple(self.slots))
        if len(self.slots) < 1:
            raise ValueError("A Library needs at least one slot (max_specialists >= 1)")
        if not all(isinstance(s, Slot) for s in self.slots):
            raise TypeError("Library.slots must contain Slot objects")

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def empty(cls, max_specialists: int = 5, router: str = DEFAULT_ROUTER) -> "Library":
        """The seed: every slot inactive, every description INACTIVE."""
        if not isinstance(max_specialists, int) or max_specialists < 1:
            raise ValueError(f"max_specialists must be an int >= 1, got {max_specialists!r}")
        return cls(router=router, slots=tuple(Slot() for _ in range(max_specialists)))

    # -- reading -----------------------------------------------------------------------------
    @property
    def max_specialists(self) -> int:
        return len(self.slots)

    def slot(self, k: int) -> Slot:
        self._check_id(k)
        return self.slots[k - 1]

    def slot_ids(self) -> range:
        return range(1, len(self.slots) + 1)

    def items(self) -> Iterator[tuple[int, Slot]]:
        return zip(self.slot_ids(), self.slots)

    def active_ids(self) -> tuple[int, ...]:
        return tuple(k for k, s in self.items() if s.active)

    def inactive_ids(self) -> tuple[int, ...]:
        return tuple(k for k, s in self.items() if not s.active)

    def descriptions(self) -> dict[int, str]:
        """Every slot's description (inactive ones read INACTIVE)."""
        return {k: s.description for k, s in self.items()}

    # -- editing (each returns a new Library) --------------------------------------------------
    def with_slot(self, k: int, slot: Slot) -> "Library":
        self._check_id(k)
        slots = list(self.slots)
        slots[k - 1] = slot
        return replace(self, slots=tuple(slots))

    def with_router(self, router: str) -> "Library":
        return replace(self, router=router)

    # -- identity & serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"router": self.router, "slots": [s.to_dict() for s in self.slots]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Library":
        if not isinstance(data, dict) or set(data) != {"router", "slots"}:
            raise ValueError("A Library dict has exactly the keys 'router' and 'slots'")
        return cls(router=data["router"], slots=tuple(Slot.from_dict(s) for s in data["slots"]))

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Library":
        return cls.from_dict(json.loads(text))

    @property
    def content_hash(self) -> str:
        """sha256 of the canonical JSON: equal content <=> equal hash, in any process."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def _check_id(self, k: int) -> None:
        if not isinstance(k, int) or not 1 <= k <= len(self.slots):
            raise IndexError(f"Slot ids run 1..{len(self.slots)}; got {k!r} (0 is the fallback, not a slot)")
