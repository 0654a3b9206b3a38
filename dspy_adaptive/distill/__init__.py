"""A distilled router: serve a RoutedProgram without paying its LM router on every request.

After compile, `routed.distill_router(trainset + valset)` asks the optimized LM router for its decision on
each request, learns those decisions with a small calibrated classifier (scikit-learn over TF-IDF features,
or over a local text embedding where one is installed; the kind is chosen on held-out agreement), and
serves with it: a request whose confidence is under the threshold still goes to the LM router, so the
program decides no worse than before where the classifier is unsure. `AdaptiveGEPA(distill_router=True)`
does it at the end of compile.

The distilled router is part of the program's state (saved as JSON data only, shown by `export`), bound to
the library and router it imitates: it is dropped when they change. See `model`, `train`, `serve`, `api`.
"""

from dspy_adaptive.distill.api import (
    LMDecision,
    RoutingComparison,
    compare_routing,
    distill_router,
    label_requests,
    lm_decision,
    request_inputs,
)
from dspy_adaptive.distill.embed import EmbedderUnavailable, available_embedders, register_embedder
from dspy_adaptive.distill.model import Binding, Decision, DistilledRouter, DistilledRouterError
from dspy_adaptive.distill.train import DistillError, DistillSettings

__all__ = ["Binding", "Decision", "DistillError", "DistillSettings", "DistilledRouter", "DistilledRouterError",
           "EmbedderUnavailable", "LMDecision", "RoutingComparison", "available_embedders", "compare_routing",
           "distill_router", "label_requests", "lm_decision", "register_embedder", "request_inputs"]
