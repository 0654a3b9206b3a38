"""The one learning-curve figure: a value (best validation mean so far, a checkpoint's mean) against scored calls,
drawn for AdaptiveGEPA's run record, the OpenEndedOptimizer's and the demo's."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def learning_curve(path: str | Path, steps: Sequence[tuple[float, float]], *, title: str, ylabel: str,
                   points: Sequence[tuple[float, float]] = (), end: float | None = None,
                   steps_label: str = "best so far", points_label: str = "candidates") -> Path:
    """A step line through `steps` ((scored calls, value), extended to `end`), and `points` as dots."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if points:
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=14, alpha=0.5, label=points_label)
    if steps:
        xs, ys = [s[0] for s in steps], [s[1] for s in steps]
        if end is not None and end > xs[-1]:
            xs, ys = xs + [end], ys + [ys[-1]]
        ax.step(xs, ys, where="post", marker="o" if not points else None, label=steps_label)
    ax.set_xlabel("scored calls")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if points or steps:
        ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
