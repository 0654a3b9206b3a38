"""Old import paths of modules that moved when the package took its layered layout (one release).

`import dspy_adaptive.routed_program` (or `from dspy_adaptive.teleprompter import AdaptiveGEPA`, or a pickle
that names an old path) still works: it gives the module at its new path -- the same module object, so
classes, `isinstance` checks and monkeypatching agree -- with a DeprecationWarning naming the new path.
Nothing is imported until an old path is asked for. Removed in the next release.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

#: old dotted path -> new dotted path (a package's submodules follow it: `oeo.runner` -> `optimizers.oeo.runner`)
MOVED = {
    "dspy_adaptive.library": "dspy_adaptive.program.library",
    "dspy_adaptive.routed_program": "dspy_adaptive.program.routed",
    "dspy_adaptive.profiles": "dspy_adaptive.program.profiles",
    "dspy_adaptive.scoring": "dspy_adaptive.program.scoring",
    "dspy_adaptive.records": "dspy_adaptive.schema",
    "dspy_adaptive.results": "dspy_adaptive.record.run_record",
    "dspy_adaptive.detailed": "dspy_adaptive.record.dspy_result",
    "dspy_adaptive.analysis": "dspy_adaptive.record.analysis",
    "dspy_adaptive.plots": "dspy_adaptive.record.plots",
    "dspy_adaptive.tracking": "dspy_adaptive.record.tracking",
    "dspy_adaptive.merge.census": "dspy_adaptive.record.merge_census",
    "dspy_adaptive.teleprompter": "dspy_adaptive.optimizers.adaptive_gepa",
    "dspy_adaptive.compat": "dspy_adaptive.optimizers.gepa_compat",
    "dspy_adaptive.oeo": "dspy_adaptive.optimizers.oeo",
    "dspy_adaptive.faults": "dspy_adaptive.testing.lm_faults",
    "dspy_adaptive.formatting": "dspy_adaptive.lm.adapter_memo",
    "dspy_adaptive.usage": "dspy_adaptive.lm.usage",
    "dspy_adaptive.untrusted": "dspy_adaptive.escaping",
}


def new_name(old: str) -> str | None:
    """The module's path now, for a moved module or a submodule of a moved package; None otherwise."""
    for before, after in MOVED.items():
        if old == before or old.startswith(before + "."):
            return after + old[len(before):]
    return None


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec) -> ModuleType:
        new = new_name(spec.name)
        warnings.warn(f"{spec.name} moved to {new}; the old path works until the next release",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__   # the import system now sets __spec__ to the alias's: put it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        alias = module.__spec__
        if alias is not None and alias.loader is self and alias.loader_state is not None:
            module.__spec__ = alias.loader_state


def install() -> None:
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())   # first: a moved package's submodules must not load twice
