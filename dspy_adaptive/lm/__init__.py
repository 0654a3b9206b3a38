"""LM backends: in-process GGUF models (llama-cpp-python) and a single `make_lm(spec)` switch.

Importing this package never imports llama_cpp; the model loads on the first call.
"""

from dspy_adaptive.lm.local import (
    LlamaCppEngine,
    default_model_path,
    llama_response_format,
    local_lm,
    make_lm,
    parse_spec,
    to_chat_messages,
)

__all__ = [
    "LlamaCppEngine",
    "default_model_path",
    "llama_response_format",
    "local_lm",
    "make_lm",
    "parse_spec",
    "to_chat_messages",
]
