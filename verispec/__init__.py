"""verispec: exact speculative decoding of Llama-family language models.

The names below are imported on first use, so that importing the package (and starting the command line) does
not import torch before it is needed."""
from importlib import import_module

__version__ = "0.1.0"
_WHERE = {"Result": "api", "Speculator": "api", "Target": "api", "make_proposer": "api", "Engine": "engine",
          "Generation": "generation", "GenerationConfig": "generation", "SamplingConfig": "sampling",
          "verify_chain": "verify"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f".{_WHERE[name]}", __name__), name)
    try:                                         # a subpackage or module: verispec.model, verispec.proposers ...
        return import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module 'verispec' has no attribute {name!r}") from None
