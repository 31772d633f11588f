"""verispec: exact speculative decoding of Llama-family language models."""
from .api import Result, Speculator, Target, make_proposer
from .engine import Engine, Generation, GenerationConfig
from .sampling import SamplingConfig
from .verify import verify_chain

__version__ = "0.1.0"
__all__ = ["Engine", "Generation", "GenerationConfig", "Result", "SamplingConfig", "Speculator", "Target",
           "make_proposer", "verify_chain"]
