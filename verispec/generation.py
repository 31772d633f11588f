"""What a generation is asked for (`GenerationConfig`) and what it gives back (`Generation`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import VerispecError
from .sampling import SamplingConfig, is_int
from .stats import GenerationStats


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 128
    k: int | str = 4                            # draft tokens per cycle, or "auto" (ignored by plain decoding)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    stop_token_ids: frozenset[int] = frozenset()
    k_max: int = 12                             # the largest k "auto" may choose
    acceptance: str = "exact"                   # "typical": Medusa's typical acceptance on trees -- LOSSY

    def __post_init__(self):
        for name, value in (("max-new-tokens", self.max_new_tokens), ("k", self.k), ("k-max", self.k_max),
                            ("seed", self.seed)):
            if not is_int(value) and not (name == "k" and value == "auto"):
                raise VerispecError(f"{name} must be an integer{' or auto' if name == 'k' else ''}, got {value!r}")
        if self.max_new_tokens < 1:
            raise VerispecError(f"max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.k != "auto" and self.k < 1:
            raise VerispecError(f"k must be >= 1 or 'auto', got {self.k}")
        if self.k_max < 1:
            raise VerispecError(f"k-max must be >= 1, got {self.k_max}")
        if not 0 <= self.seed < 2 ** 64:                    # what torch.Generator.manual_seed takes
            raise VerispecError(f"seed must be in [0, 2^64), got {self.seed}")
        if self.acceptance not in ("exact", "typical"):
            raise VerispecError(f"acceptance must be 'exact' or 'typical', got {self.acceptance!r}")

    @property
    def longest_draft(self) -> int:
        return longest_draft(self.k, self.k_max)


def longest_draft(k: int | str, k_max: int) -> int:
    """The most draft tokens a cycle may verify: k, or k_max where k is "auto"."""
    return k_max if k == "auto" else k


@dataclass
class Generation:
    token_ids: list[int]
    stats: GenerationStats
    finish_reason: str          # "stop" (a stop token), "length", or "cancelled" (Sequence.cancel)
