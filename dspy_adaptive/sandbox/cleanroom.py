"""Everything specialist code can touch, defined in a clean room.

This file is NOT imported. `runtime.load_cleanroom()` executes its text in a fresh namespace whose
builtins are the sandbox's safe builtins and nothing else, so every Python function and class it
defines -- the RestrictedPython guard hooks, the `type`/`hasattr` replacements, the import hook,
the print buffer, the dspy shim, the tool stubs -- has a `__globals__` that holds no module, no
`getattr`, no `open`, no `__import__`. The few real primitives they need (the real `getattr` and
`type`, the module proxies' namespaces, the RPC to the host) are handed to `build()` and held in
closures. Reaching any of them takes a dunder attribute (`__globals__`, `__closure__`, `__self__`),
which both the compiler transform and `guarded_getattr` refuse, and no allow-listed name copies
attributes by name (allowlist.py) -- this file is the second line behind that one.

No imports here, no module-level state: a new worker process builds everything once for its one
request (runtime.py).
"""

SANDBOX_MODULE = "specialist"


def build(real_getattr, real_type, module_type, module_names, internal_imports, denied_attributes, rpc,
          tool_names, stdout_cap, max_predictor_calls, type_name_ok):
    """Return the restricted globals for one request and the shim's internals (dict)."""

    # ---------------------------------------------------------------- read-only module proxies
    class ModuleProxy:
        __slots__ = ("_proxy_name", "_proxy_ns")

        def __init__(self, name, ns):
            object.__setattr__(self, "_proxy_name", name)
            object.__setattr__(self, "_proxy_ns", ns)

        def __getattr__(self, attr):
            ns = object.__getattribute__(self, "_proxy_ns")
            if attr.startswith("_") or attr not in ns:
                raise AttributeError("module " + repr(object.__getattribute__(self, "_proxy_name"))
                                     + " has no attribute " + repr(attr) + " in a specialist")
            return ns[attr]

        def __setattr__(self, attr, value):
            raise AttributeError("modules are read-only in a specialist")

        def __delattr__(self, attr):
            raise AttributeError("modules are read-only in a specialist")

        def __repr__(self):
            return "<module " + repr(object.__getattribute__(self, "_proxy_name")) + " (sandboxed)>"

    proxies = {name: ModuleProxy(name, dict(ns)) for name, ns in module_names.items()}
    empty = {name: ModuleProxy(name, {}) for name in internal_imports}

    # ---------------------------------------------------------------- guards
    def guarded_getattr(obj, name, *default):
        if not isinstance(name, str):
            raise TypeError("attribute name must be a string")
        if name.startswith("_"):
            if not (name == "__init__" and isinstance(obj, super)):
                raise AttributeError("access to attribute " + repr(name) + " is not allowed in a specialist")
        elif name in denied_attributes:
            raise AttributeError("access to attribute " + repr(name) + " is not allowed in a specialist")
        value = real_getattr(obj, name, *default)
        if isinstance(value, module_type):
            raise AttributeError("access to module attribute " + repr(name) + " is not allowed in a specialist")
        return value

    def guarded_hasattr(obj, name):
        try:
            guarded_getattr(obj, name)
        except AttributeError:
            return False
        return True

    def guarded_getitem(obj, key):
        return obj[key]

    def guarded_iter(obj):
        return iter(obj)

    def unpack_sequence(it, spec, _getiter_):
        ret = list(_getiter_(it))
        if len(ret) < spec["min_len"]:
            return ret
        for idx, child in spec["childs"]:
            ret[idx] = unpack_sequence(ret[idx], child, _getiter_)
        return ret

    def iter_unpack_sequence(it, spec, _getiter_):
        for ob in _getiter_(it):
            yield unpack_sequence(ob, spec, _getiter_)

    def inplacevar(op, x, y):
        if op == "+=":
            x += y
        elif op == "-=":
            x -= y
        elif op == "*=":
            x *= y
        elif op == "/=":
            x /= y
        elif op == "//=":
            x //= y
        elif op == "%=":
            x %= y
        elif op == "**=":
            x **= y
        elif op == "<<=":
            x <<= y
        elif op == ">>=":
            x >>= y
        elif op == "&=":
            x &= y
        elif op == "^=":
            x ^= y
        elif op == "|=":
            x |= y
        elif op == "@=":
            x @= y
        else:
            raise SyntaxError("unsupported in-place operator " + repr(op))
        return x

    def apply(f, *args, **kwargs):
        return f(*args, **kwargs)

    hash_key = [0, 1]   # set at random for each request (worker.scramble): a request-keyed hash()

    def keyed_hash(obj):
        """hash(obj) as the sandbox sees it: a bijection of the interpreter's hash keyed per request, so equal
        objects hash equal within a request while the values differ from one request to the next."""
        h = ((hash(obj) ^ hash_key[0]) * hash_key[1]) & 0xFFFFFFFFFFFFFFFF
        h = h - 0x10000000000000000 if h >= 0x8000000000000000 else h
        return -2 if h == -1 else h

    def safe_type(*args):
        """type(x) with exactly one argument; never a metaclass (so no class building)."""
        if len(args) != 1:
            raise TypeError("type() takes exactly one argument in a specialist")
        t = real_type(args[0])
        if issubclass(t, real_type):
            raise TypeError("type() of a class is not available in a specialist")
        return t

    class CappedPrinter:
        """Target of RestrictedPython's print transform; keeps at most `cap` characters."""

        def __init__(self, cap):
            object.__setattr__(self, "_state", [cap, [], 0, False])

        def write(self, text):
            st = object.__getattribute__(self, "_state")
            text = str(text)
            room = st[0] - st[2]
            if room <= 0:
                st[3] = True
                return
            if len(text) > room:
                text, st[3] = text[:room], True
            st[1].append(text)
            st[2] += len(text)

        def _call_print(self, *objects, sep=" ", end="\n", file=None, flush=False):
            sep = " " if sep is None else str(sep)
            end = "\n" if end is None else str(end)
            self.write(sep.join(str(o) for o in objects) + end)

        def __call__(self, _getattr_=None):   # `printed`
            return self.text()

        def text(self):
            st = object.__getattribute__(self, "_state")
            s = "".join(st[1])
            return s + "\n[... output truncated]" if st[3] else s

    printer = CappedPrinter(stdout_cap)

    def print_hook(_getattr_=None):   # RestrictedPython's `_print_`: every print() goes to `printer`
        return printer

    # ---------------------------------------------------------------- dspy shim
    class HostError(RuntimeError):
        """A host-side predictor/tool call failed or was refused."""

    class PredictorLimitError(RuntimeError):
        """The predictor call limit of this request was reached."""

    class Prediction:
        def __init__(self, *args, **kwargs):
            store = dict(*args, **kwargs) if args else dict(kwargs)
            object.__setattr__(self, "_store", store)

        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            store = object.__getattribute__(self, "_store")
            if name in store:
                return store[name]
            raise AttributeError("Prediction has no field " + repr(name))

        def __setattr__(self, name, value):
            if not isinstance(name, str) or name.startswith("_"):
                raise AttributeError("cannot set " + repr(name) + " on a Prediction")
            object.__getattribute__(self, "_store")[name] = value

        def __getitem__(self, key):
            return object.__getattribute__(self, "_store")[key]

        def __contains__(self, key):
            return key in object.__getattribute__(self, "_store")

        def __len__(self):
            return len(object.__getattribute__(self, "_store"))

        def __iter__(self):
            return iter(list(object.__getattribute__(self, "_store")))

        def keys(self):
            return list(object.__getattribute__(self, "_store").keys())

        def values(self):
            return list(object.__getattribute__(self, "_store").values())

        def items(self):
            return list(object.__getattribute__(self, "_store").items())

        def get(self, key, default=None):
            return object.__getattribute__(self, "_store").get(key, default)

        def toDict(self):  # noqa: N802 (dspy API)
            return dict(object.__getattribute__(self, "_store"))

        def __repr__(self):
            store = object.__getattribute__(self, "_store")
            return "Prediction(" + ", ".join(str(k) + "=" + repr(v) for k, v in store.items()) + ")"

    class Field:
        def __init__(self, io, desc=None, prefix=None):
            self.io, self.desc, self.prefix = io, desc, prefix

    def InputField(*, desc=None, prefix=None, **ignored):  # noqa: N802 (dspy API)
        return Field("input", desc=desc, prefix=prefix)

    def OutputField(*, desc=None, prefix=None, **ignored):  # noqa: N802 (dspy API)
        return Field("output", desc=desc, prefix=prefix)

    class Signature:
        """`class QA(dspy.Signature)` with InputField/OutputField, or `dspy.Signature("a -> b", "instr")`."""

        def __init__(self, spec, instructions=None):
            if not isinstance(spec, str) or "->" not in spec:
                raise ValueError("invalid signature " + repr(spec)[:100] + ": expected 'inputs -> outputs'")
            self.spec, self.instructions = spec.strip(), instructions

        def with_instructions(self, instructions):
            return Signature(self.spec, instructions)

    def type_text(ann):
        if ann is None or ann is str or ann == "str":
            return None
        if isinstance(ann, str):
            return ann if type_name_ok(ann) else None
        if isinstance(ann, real_type) and not real_getattr(ann, "__args__", None):
            return ann.__name__
        s = repr(ann).replace("typing.", "")
        return s if type_name_ok(s) else None

    def lower(sig):
        """A string / Signature instance / Signature subclass as (signature text, instructions)."""
        if isinstance(sig, str):
            if "->" not in sig:
                raise ValueError("invalid signature " + repr(sig)[:100] + ": expected 'inputs -> outputs'")
            return sig.strip(), None
        if isinstance(sig, Signature):
            return sig.spec, sig.instructions
        if isinstance(sig, real_type) and issubclass(sig, Signature) and sig is not Signature:
            ann, fields = {}, {}
            for klass in reversed(sig.__mro__):
                ann.update(klass.__dict__.get("__annotations__", {}))
                fields.update({k: v for k, v in klass.__dict__.items() if isinstance(v, Field)})
            order = [k for k in ann if k in fields] + [k for k in fields if k not in ann]
            parts = {"input": [], "output": []}
            descs = []
            for k in order:
                t = type_text(ann.get(k))
                parts[fields[k].io].append(k + ": " + t if t else k)
                if fields[k].desc:
                    descs.append("- " + k + ": " + str(fields[k].desc))
            if not parts["output"]:
                raise ValueError("signature class " + sig.__name__ + " has no OutputField")
            spec = ", ".join(parts["input"]) + " -> " + ", ".join(parts["output"])
            doc = (sig.__doc__ or "").strip() or None
            if descs:
                doc = ((doc + "\n\n") if doc else "") + "Fields:\n" + "\n".join(descs)
            return spec, doc
        raise TypeError("signature must be a string or a dspy.Signature, got " + real_type(sig).__name__)

    calls = [0]
    anonymous = [0]
    root = [None]

    class Predict:
        KIND = "Predict"

        def __init__(self, signature, instructions=None, **config):
            spec, doc = lower(signature)
            object.__setattr__(self, "_spec", spec)
            object.__setattr__(self, "_instructions", instructions if instructions is not None else doc)
            object.__setattr__(self, "_pname", None)

        @property
        def signature(self):
            return self._spec

        @property
        def instructions(self):
            return self._instructions

        def __call__(self, *args, **kwargs):
            if args:
                raise TypeError(self.KIND + " takes keyword arguments only")
            return self.forward(**kwargs)

        def forward(self, **kwargs):
            return call_predictor(self, kwargs)

        def __repr__(self):
            return self.KIND + "(" + repr(self._spec) + ")"

    class ChainOfThought(Predict):
        KIND = "ChainOfThought"

    class Module:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, *args, **kwargs):
            return self.forward(*args, **kwargs)

        def named_predictors(self):
            return named_predictors(self)

        def predictors(self):
            return [p for _, p in named_predictors(self)]

    def named_predictors(start):
        out, seen = [], set()

        def walk(obj, path, depth):
            if depth > 8 or id(obj) in seen:
                return
            if isinstance(obj, Predict):
                seen.add(id(obj))
                out.append((path, obj))
            elif isinstance(obj, Module):
                seen.add(id(obj))
                for k, v in list(obj.__dict__.items()):
                    if isinstance(k, str) and not k.startswith("_"):
                        walk(v, path + "." + k if path else k, depth + 1)
            elif isinstance(obj, (list, tuple)):
                for i, v in enumerate(obj):
                    walk(v, path + "[" + str(i) + "]", depth + 1)
            elif isinstance(obj, dict):
                for k, v in list(obj.items()):
                    if isinstance(k, (str, int)):
                        walk(v, path + "[" + repr(k)[:40] + "]", depth + 1)

        walk(start, "", 0)
        return out

    def plain(value):
        if isinstance(value, Prediction):
            return value.toDict()
        return value

    def call_predictor(pred, kwargs):
        if pred._pname is None:
            for name, p in (named_predictors(root[0]) if root[0] is not None else ()):
                if p._pname is None:
                    object.__setattr__(p, "_pname", name)
            if pred._pname is None:
                anonymous[0] += 1
                object.__setattr__(pred, "_pname", "anonymous_" + pred.KIND.lower() + "_" + str(anonymous[0]))
        calls[0] += 1
        if calls[0] > max_predictor_calls:
            raise PredictorLimitError("predictor call limit (" + str(max_predictor_calls) + ") exceeded")
        inputs = {k: plain(v) for k, v in kwargs.items()}
        ok, value = rpc({"op": "predict", "name": pred._pname, "kind": pred.KIND, "signature": pred._spec,
                         "instructions": pred._instructions, "inputs": inputs})
        if ok == "limit":
            raise PredictorLimitError(value)
        if not ok:
            raise HostError("predictor " + repr(pred._pname) + " failed: " + str(value))
        if not isinstance(value, dict):
            raise HostError("predictor " + repr(pred._pname) + " returned no fields")
        return Prediction(**value)

    def make_tool(name):
        def tool(*args, **kwargs):
            if args:
                raise TypeError("tool " + repr(name) + " takes keyword arguments only")
            ok, value = rpc({"op": "tool", "name": name, "kwargs": kwargs})
            if ok == "limit":
                raise PredictorLimitError(value)
            if not ok:
                raise HostError("tool " + repr(name) + " failed: " + str(value))
            return value
        tool.__name__ = tool.__qualname__ = name
        return tool

    shim_ns = dict(Module=Module, Predict=Predict, ChainOfThought=ChainOfThought, Prediction=Prediction,
                   Signature=Signature, InputField=InputField, OutputField=OutputField, HostError=HostError,
                   PredictorLimitError=PredictorLimitError)
    dspy_proxy = ModuleProxy("dspy", shim_ns)

    # ---------------------------------------------------------------- imports, writes, globals
    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level:
            raise ImportError("relative imports are not allowed in a specialist")
        if name == "dspy":
            return dspy_proxy
        if name in proxies:
            return proxies[name]
        if name in empty:   # an import made by C code (datetime.strftime -> time); see allowlist.py
            return empty[name]
        raise ImportError("import of " + repr(name) + " is not allowed in a specialist")

    writable = (dict, list, set, bytearray, Prediction, module_names["collections"]["deque"])

    def guarded_write(obj):
        if isinstance(obj, writable):
            return obj
        cls = obj if isinstance(obj, real_type) else real_type(obj)
        if real_type.__getattribute__(cls, "__module__") == SANDBOX_MODULE:
            return obj
        raise TypeError("cannot modify " + real_type(obj).__name__ + " objects in a specialist")

    return {
        "getattr": guarded_getattr, "hasattr": guarded_hasattr, "getitem": guarded_getitem,
        "getiter": guarded_iter, "unpack_sequence": unpack_sequence, "iter_unpack_sequence": iter_unpack_sequence,
        "inplacevar": inplacevar, "apply": apply, "type": safe_type, "write": guarded_write, "hash": keyed_hash,
        "hash_key": hash_key,
        "import": guarded_import, "printer": printer, "print": print_hook, "dspy": dspy_proxy, "shim": shim_ns,
        "tools": {n: make_tool(n) for n in tool_names}, "root": root, "calls": calls,
        "named_predictors": named_predictors, "lower": lower,
    }
