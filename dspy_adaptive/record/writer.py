"""The one writer of a run's record: a machine-readable JSON file, a Markdown report for people and PNG figures,
for AdaptiveGEPA, the OpenEndedOptimizer and the demo alike.

    write_record(log_dir, data=result.to_dict(), report=render_markdown(result),
                 plots={"learning_curve.png": lambda path: learning_curve(path, points)})

Every file is written whole (a temporary file, then a rename), so a reader never sees half a report, and a
figure that cannot be drawn is left out with a warning instead of losing the JSON and the report.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

#: A figure: draws itself to the PNG path it is given.
Figure = Callable[[Path], Any]


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_record(directory: str | Path, *, data: Mapping[str, Any], report: str,
                 plots: Mapping[str, Figure] | None = None, data_name: str = "run.json",
                 report_name: str = "report.md") -> Path:
    """Write `data` (JSON), `report` (Markdown) and each of `plots` (file name -> figure) into `directory`."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    _replace(root / data_name, json.dumps(data, indent=1, default=str))
    _replace(root / report_name, report)
    for name, draw in (plots or {}).items():
        try:
            draw(root / name)
        except Exception as e:  # noqa: BLE001 - a figure is never worth the record
            warnings.warn(f"{name} could not be drawn ({type(e).__name__}: {e}); the record is complete without it",
                          RuntimeWarning, stacklevel=2)
    return root
