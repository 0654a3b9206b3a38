"""Execution profiles (paper Appendix B): "fast" and "deep" LMs built from one actor LM, and the
`PROFILE` a specialist declares in its own source.

The paper's settings (Qwen3-8B actor):

| profile | thinking | temperature | output tokens |
|---------|----------|-------------|---------------|
| fast    | off      | 0.3         | 4,096         |
| deep    | on       | 0.6         | 8,192         |

The router always runs on fast; the fallback P0 on deep. `profiles_from(lm)` copies the actor
`dspy.LM` with the overrides of its model family (`profile_overrides` is the documented mapping):

* Qwen3 (a model name containing "qwen3", served by vLLM or any OpenAI-compatible server, e.g.
  `hosted_vllm/Qwen/Qwen3-8B`, `openai/Qwen/Qwen3-8B` with an api_base): the thinking switch is the
  chat template's `enable_thinking`, sent through litellm as
  `extra_body={"chat_template_kwargs": {"enable_thinking": ...}}`; temperature and max_tokens as above.
* OpenAI reasoning models (o1/o3/o4/gpt-5...: DSPy requires temperature 1.0 and >= 16,000 tokens):
  thinking maps to `reasoning_effort`, "low" for fast and "high" for deep; temperature and the token
  limit are left as the actor has them.
* Any other model (e.g. GPT-4.1, the paper's second actor): no thinking switch. As in the paper's
  GPT-4.1 setting, both profiles keep the actor's temperature (0.3 if it has none) and differ in the
  output-token limit: 4,096 (fast) and 8,192 (deep).

A specialist chooses its profile with a module-level `PROFILE = "fast"` or `PROFILE = "deep"` in its
source (the paper: "a generated program chooses its profile through a module-level PROFILE
declaration"), so a program rewrite can change it. `declared_profile` reads it statically from the
source's syntax tree on the host; nothing is executed. A source without a declaration runs on its
slot's stored profile (the one chosen at activation).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from typing import Any

PROFILES = ("fast", "deep")
PROFILE_NAME = "PROFILE"

#: Appendix B: (thinking, temperature, max output tokens) per profile.
PAPER_SETTINGS = {"fast": (False, 0.3, 4096), "deep": (True, 0.6, 8192)}


@dataclass(frozen=True)
class Profiles:
    """The two execution-profile LMs built from one actor, and how each was configured."""

    fast: Any
    deep: Any
    family: str                         # "qwen3" | "openai_reasoning" | "other"
    overrides: dict[str, dict[str, Any]]

    def __iter__(self):                 # fast, deep = profiles_from(lm)
        return iter((self.fast, self.deep))


def model_family(model: str) -> str:
    """"qwen3", "openai_reasoning" or "other", from a litellm model string."""
    name = model.split("/")[-1].lower() if model else ""
    if "qwen3" in model.lower():
        return "qwen3"
    if re.match(r"^(?:o[1345](?:-(?:mini|nano|pro))?(?:-\d{4}-\d{2}-\d{2})?|gpt-5(?:\.\d+)*(?!-chat)(?:-.*)?)$", name):
        return "openai_reasoning"
    return "other"


def profile_overrides(model: str, profile: str, *, temperature: float | None = None) -> dict[str, Any]:
    """The keyword overrides (for `dspy.LM.copy`) that make `model` run as `profile` (see module docstring).
    `temperature`: the actor's own temperature, kept for models without a thinking switch."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    thinking, temp, tokens = PAPER_SETTINGS[profile]
    family = model_family(model)
    if family == "qwen3":
        return {"temperature": temp, "max_tokens": tokens,
                "extra_body": {"chat_template_kwargs": {"enable_thinking": thinking}}}
    if family == "openai_reasoning":
        return {"reasoning_effort": "high" if thinking else "low"}
    return {"temperature": 0.3 if temperature is None else temperature, "max_tokens": tokens}


def profiles_from(lm: Any) -> Profiles:
    """Fast and deep copies of the actor `lm` (a `dspy.LM`) with the paper's profile settings.

    An LM without `copy` or `model` (e.g. a custom BaseLM) is used as it is for both profiles."""
    model = str(getattr(lm, "model", "") or "")
    if not model or not hasattr(lm, "copy"):
        return Profiles(lm, lm, "other", {"fast": {}, "deep": {}})
    temperature = (getattr(lm, "kwargs", None) or {}).get("temperature")
    overrides = {p: profile_overrides(model, p, temperature=temperature) for p in PROFILES}
    extra = (getattr(lm, "kwargs", None) or {}).get("extra_body")
    if extra and "extra_body" in overrides["fast"]:     # keep the actor's own extra_body fields
        for p in PROFILES:
            overrides[p]["extra_body"] = {**extra, **overrides[p]["extra_body"]}
    return Profiles(lm.copy(**overrides["fast"]), lm.copy(**overrides["deep"]), model_family(model), overrides)


# -- PROFILE in a specialist's source ---------------------------------------------------------------------

def declared_profile(source: str) -> tuple[str | None, str | None]:
    """(profile, problem) from a module-level `PROFILE = "fast" | "deep"` in `source`, read from its syntax
    tree (never executed). (None, None): no declaration. A declaration that is not exactly one plain
    assignment of the string "fast" or "deep" at module level is a problem (profile None). Remembered per
    source (a routed request asks for it twice; a large program's parse is not free)."""
    return _declared_profile(source) if isinstance(source, str) else (None, None)


@functools.lru_cache(maxsize=256)
def _declared_profile(source: str) -> tuple[str | None, str | None]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, None            # the sandbox's compile step reports why it cannot be parsed
    found: list[ast.AST] = []
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == PROFILE_NAME for t in targets):
            found.append(node)
    if not found:
        return None, None
    if len(found) > 1:
        return None, f"line {found[1].lineno}: {PROFILE_NAME} is declared more than once"
    node = found[0]
    value = getattr(node, "value", None)
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(value, ast.Constant)
            and value.value in PROFILES):
        return None, (f"line {node.lineno}: {PROFILE_NAME} must be assigned once, as {PROFILE_NAME} = \"fast\" "
                      f"or {PROFILE_NAME} = \"deep\"")
    return value.value, None


def effective_profile(source: str, stored: str) -> str:
    """The profile a specialist runs on: its source's declaration, else the slot's stored profile."""
    declared, _ = declared_profile(source)
    return declared or stored


__all__ = ["PAPER_SETTINGS", "PROFILES", "Profiles", "declared_profile", "effective_profile", "model_family",
           "profile_overrides", "profiles_from"]
