"""THE allow-list of what a specialist may import: module -> the public names it may use.

One list, read by the static policy (imports and `module.name` references are checked against it),
by the in-worker module proxies (a proxy holds exactly these names and nothing else), by the
reflection prompts and by the baselines' prompt text (`describe()`).

Why names and not whole modules: a module's namespace holds more than its documented functions --
`functools.update_wrapper` copies any attribute by name (it handed out real `__globals__`),
`typing.get_origin(typing.Type)` returns the real `type`, `decimal.DefaultContext` and
`typing.overload` keep process-wide state, `statistics.sys` is the `sys` module. Listing what is
allowed, instead of denying what is known to be bad, keeps names a new Python adds out by default.
Every name here is a pure function, a constant, a value type or an exception class.

Standalone (stdlib only): the sandbox worker imports it as a top-level module.
"""

from __future__ import annotations

ALLOWED_NAMES: dict[str, frozenset[str]] = {
    "collections": frozenset({"ChainMap", "Counter", "OrderedDict", "defaultdict", "deque", "namedtuple"}),
    "datetime": frozenset({"MAXYEAR", "MINYEAR", "UTC", "date", "datetime", "time", "timedelta", "timezone"}),
    "decimal": frozenset({
        "Clamped", "Context", "Decimal", "DecimalException", "DivisionByZero", "FloatOperation", "Inexact",
        "InvalidOperation", "MAX_EMAX", "MAX_PREC", "MIN_EMIN", "MIN_ETINY", "Overflow", "ROUND_05UP",
        "ROUND_CEILING", "ROUND_DOWN", "ROUND_FLOOR", "ROUND_HALF_DOWN", "ROUND_HALF_EVEN", "ROUND_HALF_UP",
        "ROUND_UP", "Rounded", "Subnormal", "Underflow", "localcontext"}),
    "fractions": frozenset({"Fraction"}),
    "functools": frozenset({"cache", "cached_property", "cmp_to_key", "lru_cache", "partial", "reduce",
                            "total_ordering"}),
    "heapq": frozenset({"heapify", "heappop", "heappush", "heappushpop", "heapreplace", "merge", "nlargest",
                        "nsmallest"}),
    "itertools": frozenset({
        "accumulate", "batched", "chain", "combinations", "combinations_with_replacement", "compress", "count",
        "cycle", "dropwhile", "filterfalse", "groupby", "islice", "pairwise", "permutations", "product",
        "repeat", "starmap", "takewhile", "tee", "zip_longest"}),
    "json": frozenset({"JSONDecodeError", "dumps", "loads"}),
    "math": frozenset({
        "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil", "comb", "copysign", "cos",
        "cosh", "degrees", "dist", "e", "erf", "erfc", "exp", "exp2", "expm1", "fabs", "factorial", "floor",
        "fmod", "frexp", "fsum", "gamma", "gcd", "hypot", "inf", "isclose", "isfinite", "isinf", "isnan",
        "isqrt", "lcm", "ldexp", "lgamma", "log", "log10", "log1p", "log2", "modf", "nan", "nextafter", "perm",
        "pi", "pow", "prod", "radians", "remainder", "sin", "sinh", "sqrt", "sumprod", "tan", "tanh", "tau",
        "trunc", "ulp"}),
    "re": frozenset({
        "A", "ASCII", "DOTALL", "I", "IGNORECASE", "M", "MULTILINE", "NOFLAG", "S", "U", "UNICODE", "VERBOSE",
        "X", "compile", "error", "escape", "findall", "finditer", "fullmatch", "match", "search", "split", "sub",
        "subn"}),
    "statistics": frozenset({
        "NormalDist", "StatisticsError", "correlation", "covariance", "fmean", "geometric_mean", "harmonic_mean",
        "linear_regression", "mean", "median", "median_grouped", "median_high", "median_low", "mode",
        "multimode", "pstdev", "pvariance", "quantiles", "stdev", "variance"}),
    "string": frozenset({
        "Template", "ascii_letters", "ascii_lowercase", "ascii_uppercase", "capwords", "digits", "hexdigits",
        "octdigits", "printable", "punctuation", "whitespace"}),
    # Only what a class-based dspy.Signature annotation needs; the rest of typing introspects or
    # builds classes (get_origin, get_args, Type, NamedTuple, TypedDict, NewType, overload, ...).
    "typing": frozenset({"Any", "Dict", "List", "Literal", "Optional", "Union"}),
}

#: The modules, in a stable order (for messages and prompts).
ALLOWED_MODULES: tuple[str, ...] = tuple(sorted(ALLOWED_NAMES))

#: Modules that C code inside the allowed modules imports lazily (datetime.strftime imports `time`,
#: datetime.strptime imports `_strptime`). CPython's C-level import calls the `__import__` of the running
#: code's builtins only for its side effect and then takes the real module from sys.modules, so the
#: sandbox's import hook lets these names through with an EMPTY proxy: C code works, while a
#: specialist that names them (refused by the static policy anyway) gets nothing.
INTERNAL_IMPORTS: frozenset[str] = frozenset({"time", "_strptime"})


#: The file name every specialist is compiled under (tracebacks name its lines with it).
FILENAME = "<specialist>"

#: Attribute names refused statically and at run time (besides anything starting with "_"): they reach
#: frames, code or globals, or evaluate format strings. RestrictedPython's INSPECT_ATTRIBUTES are
#: included by name (kept here so the worker need not import RestrictedPython; a test checks we
#: cover its set).
DENIED_ATTRIBUTES = frozenset({
    "ag_await", "ag_code", "ag_frame", "co_code", "cr_await", "cr_code", "cr_frame", "cr_origin", "f_back",
    "f_builtins", "f_code", "f_generator", "f_globals", "f_locals", "f_trace", "gi_code", "gi_frame",
    "gi_yieldfrom", "tb_frame", "tb_next",
    "format", "format_map", "vformat", "Formatter", "get_type_hints", "ForwardRef", "singledispatch",
    "singledispatchmethod", "func_globals", "im_func", "mro",
})


def allowed(module: str, name: str) -> bool:
    return name in ALLOWED_NAMES.get(module, ())


#: Modules whose allowed names are far fewer than the module offers: prompts name them explicitly.
_NARROW = ("collections", "functools", "json", "string", "typing")

#: The field types a predictor signature may use (sandbox/signature.py's grammar), for prompts.
SIGNATURE_TYPES = ("str, int, float, bool, Any, list[T], dict[str, T], Optional[T], Literal['a', 'b'], and "
                   "DSPy's dspy.Image, dspy.Audio, dspy.File, dspy.History, dspy.Code, dspy.ToolCalls, dspy.Reasoning")


def prompt_text() -> str:
    """One paragraph for LM prompts: the modules, the names of the narrow ones, the signature types."""
    narrow = "; ".join(f"{m}: {', '.join(sorted(ALLOWED_NAMES[m]))}" for m in _NARROW)
    return (f"Allowed imports: {', '.join(ALLOWED_MODULES)} -- their everyday functions and classes; from these "
            f"only the names listed: {narrow}. Predictor signatures are plain text like \"question, context: "
            f"list[str] -> answer: int\" with field types among {SIGNATURE_TYPES}.")


def describe() -> str:
    """One line per module, for prompts: 'math: acos, acosh, ...'."""
    return "\n".join(f"{m}: {', '.join(sorted(ALLOWED_NAMES[m]))}" for m in ALLOWED_MODULES)
