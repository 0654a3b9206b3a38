"""Which OS isolation layers a pool applies (host side; isolation.py applies them in the worker and must
stay light: it is part of every worker's image, so it imports no dataclasses/inspect/ast)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Layers:
    """Which OS layers a worker applies. All on by default; switching one off is for tests/diagnosis."""

    rlimits: bool = True
    uid: bool = True
    landlock: bool = True
    seccomp: bool = True
    netns: bool = True

    def to_dict(self) -> dict[str, bool]:
        return asdict(self)

    @classmethod
    def only(cls, *names: str) -> "Layers":
        unknown = set(names) - set(asdict(cls()))
        if unknown:
            raise ValueError(f"unknown isolation layers {sorted(unknown)}")
        return cls(**{k: k in names for k in asdict(cls())})

    @classmethod
    def none(cls) -> "Layers":
        return cls.only()


