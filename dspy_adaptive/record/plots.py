"""Figures for a finished run. Every function writes one PNG (matplotlib, Agg backend) and returns its path.

`write_all_plots(result, out_dir, row_labels=None)` writes them all; the routing heatmap and the
per-family bars need family labels (see `analysis.load_labels`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Patch  # noqa: E402

from dspy_adaptive.record import analysis  # noqa: E402
from dspy_adaptive.record import run_record as _results  # noqa: E402
from dspy_adaptive.record.run_record import AdaptiveGEPAResult  # noqa: E402
from dspy_adaptive.schema import slot_label  # noqa: E402

DPI = 110
BEST_COLOR = "#f2c14e"
ANCESTOR_COLOR = "#fbe7b0"
NODE_COLOR = "#e8eef6"
MERGE_COLOR = "#e07b00"
EDGE_COLOR = "#8a8a8a"
PATH_COLOR = "#b8860b"


def _save(fig: plt.Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_learning_curve(result: AdaptiveGEPAResult, path: str | Path) -> Path:
    """Best validation mean vs scored calls (the figure `write_run_record` writes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _results.plot_learning_curve(result, path)
    return path


def plot_routing_heatmap(result: AdaptiveGEPAResult, row_labels: Mapping[str, str], path: str | Path,
                         candidate: int | None = None, split: str = "validation") -> Path:
    """Family × slot counts of the rows each slot executed (default: the best candidate)."""
    idx = result.best_idx if candidate is None else candidate
    table = analysis.routing_table(result, row_labels, candidate=idx)
    lib = result.candidates[idx]
    present = {s for counts in table.values() for s in counts}
    slots = sorted({0, *lib.active_ids(), *(s for s in present if s is not None)})
    if None in present:
        slots.append(None)
    labels = list(table) or ["(no labelled rows)"]
    grid = [[table.get(lab, {}).get(s, 0) for s in slots] for lab in labels]
    _, overall = analysis.majority_mapping_agreement(table)

    fig, ax = plt.subplots(figsize=(max(5.5, 1.1 * len(slots) + 2.5), max(2.8, 0.55 * len(labels) + 1.8)))
    im = ax.imshow(grid, cmap="Blues", aspect="auto", vmin=0)
    top = max((v for r in grid for v in r), default=0) or 1
    for i, r in enumerate(grid):
        for j, v in enumerate(r):
            ax.text(j, i, str(v), ha="center", va="center", fontsize=10,
                    color="white" if v > 0.6 * top else "black")
    col_names = []
    for s in slots:
        name = slot_label(s)
        if s not in (0, None) and not lib.slot(s).active:
            name += "\n(inactive)"
        col_names.append(name)
    ax.set_xticks(range(len(slots)), col_names)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("slot that executed")
    ax.set_ylabel("family")
    ax.set_title(f"Routing of candidate #{idx} on {split}\n(post-hoc agreement {overall:.0f}%)", fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="rows")
    fig.tight_layout()
    return _save(fig, path)


def _lineage_layout(result: AdaptiveGEPAResult) -> dict[int, tuple[float, int]]:
    """Candidate -> (x, generation): generations top to bottom, within a generation ordered by the mean
    x of the parents (barycenter), so children sit under their parents and edges cross little."""
    gens = analysis.generations(result)
    levels: dict[int, list[int]] = {}
    for i, g in enumerate(gens):
        levels.setdefault(g, []).append(i)
    width = max(len(v) for v in levels.values())
    pos: dict[int, tuple[float, int]] = {}
    for g in sorted(levels):
        nodes = levels[g]
        if g > 0:
            def bary(i: int) -> tuple[float, int]:
                xs = [pos[int(p)][0] for p in result.parents[i]]
                return (sum(xs) / len(xs), i)
            nodes = sorted(nodes, key=bary)
        n = len(nodes)
        for k, i in enumerate(nodes):
            pos[i] = ((k + 0.5) * width / n, g)
    return pos


def plot_lineage(result: AdaptiveGEPAResult, path: str | Path) -> Path:
    """The archive's lineage graph: nodes "#i / val mean" by generation, reflect edges solid,
    merge edges dashed orange, the best candidate (gold) and its ancestry (light gold, bold path)."""
    pos = _lineage_layout(result)
    best = result.best_idx
    anc = analysis.ancestry(result, best)
    on_path = anc | {best}
    n_gens = max(g for _, g in pos.values()) + 1
    width = max(sum(1 for _, g in pos.values() if g == lvl) for lvl in range(n_gens))

    fig_w = min(max(5.0, 1.25 * width + 1.5), 40.0)
    fig_h = min(max(3.5, 1.25 * n_gens + 1.4), 40.0)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    box_h = 0.30
    node_r = 0.5 * box_h

    for parent, child, kind in analysis.lineage_edges(result):
        (x0, g0), (x1, g1) = pos[parent], pos[child]
        highlighted = parent in on_path and child in on_path
        merge = kind == "merge"
        color = MERGE_COLOR if merge else (PATH_COLOR if highlighted else EDGE_COLOR)
        arrow = FancyArrowPatch((x0, -g0 - node_r), (x1, -g1 + node_r), arrowstyle="-|>", mutation_scale=12,
                                linestyle="--" if merge else "-", color=color,
                                linewidth=2.6 if highlighted else 1.2, zorder=1 if not highlighted else 2,
                                shrinkA=0, shrinkB=1)
        ax.add_patch(arrow)

    for i, (x, g) in pos.items():
        face = BEST_COLOR if i == best else ANCESTOR_COLOR if i in anc else NODE_COLOR
        edge = MERGE_COLOR if result.origins[i] == "merge" else ("#7a5a00" if i in on_path else "#4a5a70")
        ax.text(x, -g, f"#{i}\n{result.val_aggregate_scores[i]:.2f}", ha="center", va="center", fontsize=9,
                fontweight="bold" if i == best else "normal", zorder=3,
                bbox=dict(boxstyle="round,pad=0.35", facecolor=face, edgecolor=edge,
                          linewidth=2.2 if i in on_path or result.origins[i] == "merge" else 1.0))
        origin = result.origins[i]
        if origin != "seed":
            ax.text(x, -g - 0.30, origin.replace("rewrite_", "rw_"), ha="center", va="top", fontsize=7,
                    color="#555555", zorder=3)

    ax.set_xlim(-0.1, width + 0.1)
    ax.set_ylim(-(n_gens - 1) - 0.65, 0.55)
    ax.set_yticks([-g for g in range(n_gens)], [f"gen {g}" for g in range(n_gens)])
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.legend(handles=[
        Patch(facecolor=BEST_COLOR, edgecolor="#7a5a00", label=f"best #{best}"),
        Patch(facecolor=ANCESTOR_COLOR, edgecolor="#7a5a00", label="ancestry of best"),
        Line2D([], [], color=EDGE_COLOR, label="reflect"),
        Line2D([], [], color=MERGE_COLOR, linestyle="--", label="merge"),
    ], loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=4, fontsize=8, frameon=False)
    ax.set_title(f"Lineage: {len(result.candidates)} candidates (#index / val mean)", fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


def plot_family_scores(result: AdaptiveGEPAResult, row_labels: Mapping[str, str], path: str | Path,
                       candidate: int | None = None) -> Path:
    """Per-family validation mean: the seed (#0) next to the best (or `candidate`)."""
    idx = result.best_idx if candidate is None else candidate
    seed = analysis.per_family_scores(result, row_labels, candidate=0)
    other = analysis.per_family_scores(result, row_labels, candidate=idx)
    families = sorted(set(seed) | set(other))
    xs = range(len(families))
    w = 0.38
    fig, ax = plt.subplots(figsize=(max(4.5, 1.2 * len(families) + 2), 3.6))
    bars_seed = ax.bar([x - w / 2 for x in xs], [seed.get(f, 0.0) for f in families], w, label="seed #0",
                       color="#9bb0c9")
    bars_best = ax.bar([x + w / 2 for x in xs], [other.get(f, 0.0) for f in families], w,
                       label=f"{'best' if candidate is None else 'candidate'} #{idx}", color="#2f6db3")
    for bars in (bars_seed, bars_best):
        ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    top = max([*seed.values(), *other.values(), 1e-9])
    ax.set_ylim(0, max(1.0, top) * 1.15)
    crowded = len(families) > 4
    ax.set_xticks(list(xs), families, rotation=20 if crowded else 0, ha="right" if crowded else "center")
    ax.set_ylabel("validation mean")
    ax.set_title("Per-family validation score")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def write_all_plots(result: AdaptiveGEPAResult, out_dir: str | Path,
                    row_labels: Mapping[str, str] | None = None) -> list[Path]:
    """learning_curve.png, lineage.png and, with labels, routing_heatmap.png and family_scores.png."""
    out = Path(out_dir)
    paths = [plot_learning_curve(result, out / "learning_curve.png"), plot_lineage(result, out / "lineage.png")]
    if row_labels:
        paths += [plot_routing_heatmap(result, row_labels, out / "routing_heatmap.png"),
                  plot_family_scores(result, row_labels, out / "family_scores.png")]
    return paths
