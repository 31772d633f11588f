"""The decoding loop: plain autoregressive decoding and speculative decoding are one loop.

Invariant: the target's KV cache holds every token of the sequence except the newest one. Each cycle
  1. the proposer drafts up to k tokens (none for plain decoding),
  2. one target pass scores [newest token, draft tokens] -> p at k + 1 positions,
  3. `verify_chain` accepts a prefix and draws the recovered or bonus token,
  4. the cache is truncated to the accepted prefix.
With no proposer, step 3 simply samples from p: plain decoding uses the very same sampler.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .autok import CostProfile
from .errors import VerispecError
from .model.llama import Llama
from .proposers.base import Proposal, Proposer
from .sampling import SamplingConfig, probs, sample
from .stats import GenerationStats
from .verify import verify_chain, verify_tree, verify_tree_typical


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
        if self.max_new_tokens < 1:
            raise VerispecError(f"max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.k != "auto" and (not isinstance(self.k, int) or self.k < 1):
            raise VerispecError(f"k must be >= 1 or 'auto', got {self.k}")
        if self.k_max < 1:
            raise VerispecError(f"k-max must be >= 1, got {self.k_max}")
        if self.acceptance not in ("exact", "typical"):
            raise VerispecError(f"acceptance must be 'exact' or 'typical', got {self.acceptance!r}")

    @property
    def longest_draft(self) -> int:
        return self.k_max if self.k == "auto" else self.k


@dataclass
class Generation:
    token_ids: list[int]
    stats: GenerationStats
    finish_reason: str          # "stop" (a stop token) or "length"


class Engine:
    def __init__(self, target: Llama, proposer: Proposer | None = None, profile: CostProfile | None = None):
        """profile: the cost model behind k = "auto" (built-in defaults when None)."""
        self.target, self.proposer, self.profile = target, proposer, profile or CostProfile()
        # proposers that draft from the target's own features (Medusa) hear the hidden states of kept positions
        self._observe = getattr(proposer, "observe", None)
        self.cache = None
        self.cached_tokens: list[int] = []      # tokens whose keys/values are in self.cache

    @property
    def static_tree(self):
        """The token tree a tree proposer fills every cycle; None for chains and plain decoding."""
        return getattr(self.proposer, "tree", None)

    @property
    def method(self) -> str:
        return "plain" if self.proposer is None else self.proposer.name

    def capacity_needed(self, prompt_len: int, cfg: GenerationConfig) -> int:
        k = 0 if self.proposer is None else cfg.longest_draft
        tree = self.static_tree            # a tree proposer verifies all its nodes at once (its draft caches them)
        return prompt_len + cfg.max_new_tokens + max(k, tree.size if tree is not None else 0) + 1

    def check_fits(self, prompt_len: int, cfg: GenerationConfig) -> None:
        limit = self.target.cfg.max_position
        if cfg.longest_draft + 1 > limit // 2:
            raise VerispecError(f"k = {cfg.longest_draft} is too large for a context of {limit} tokens")
        if self.capacity_needed(prompt_len, cfg) > limit:
            raise VerispecError(f"prompt ({prompt_len} tokens) plus max-new-tokens ({cfg.max_new_tokens}) "
                                f"exceeds the model's context of {limit} tokens")

    def _prefill(self, prompt: list[int], capacity: int, reuse_prefix: bool) -> torch.Tensor:
        """Fill the cache with the prompt (reusing a shared prefix if asked); return the last position's logits."""
        if self.cache is None or self.cache.capacity < capacity:
            self.cache, self.cached_tokens = self.target.new_cache(capacity), []
        keep = 0
        if reuse_prefix:
            for a, b in zip(self.cached_tokens, prompt[:-1]):
                if a != b:
                    break
                keep += 1
        self.cache.truncate(keep)
        device = self.target.device
        tokens = torch.tensor([prompt[keep:]], device=device)                     # [1, n]
        positions = torch.arange(keep, len(prompt), device=device)[None]          # [1, n]
        hidden = self.target(tokens, positions, self.cache)                       # [1, n, D]
        self.cached_tokens = list(prompt)
        if self._observe is not None:
            self._observe(hidden[0])
        return self.target.logits(hidden[:, -1:])                                 # [1, 1, vocab]

    @torch.inference_mode()
    def generate(self, prompt: list[int], cfg: GenerationConfig,
                 on_tokens: Callable[[list[int]], None] | None = None, reuse_prefix: bool = False) -> Generation:
        """Generate up to cfg.max_new_tokens tokens after `prompt`; `on_tokens` hears each cycle's new tokens."""
        if not prompt:
            raise VerispecError("the prompt is empty")
        if cfg.acceptance == "typical" and self.static_tree is None:
            raise VerispecError("typical acceptance needs a tree method (draft-tree or medusa)")
        self.check_fits(len(prompt), cfg)
        capacity = self.capacity_needed(len(prompt), cfg)
        if self.proposer is not None:
            self.proposer.prepare(capacity)
        device = self.target.device
        gen = torch.Generator().manual_seed(cfg.seed)
        stats = GenerationStats(prompt_tokens=len(prompt), lossy=cfg.acceptance == "typical")
        t_start = time.perf_counter()

        logits = self._prefill(prompt, capacity, reuse_prefix)
        stats.target_passes = 1
        # k = "auto": chains choose k every cycle; a tree proposer that knows its expected yield (Medusa) verifies
        # its whole tree or decodes plainly, whichever is predicted faster; other tree proposers always draft
        auto = None
        if cfg.k == "auto" and self.proposer is not None:
            tree, expected = self.static_tree, getattr(self.proposer, "expected_accepted", None)
            if tree is None:
                auto = self.profile.chooser(self.method, cfg.k_max)
            elif expected is not None:
                auto = self.profile.tree_chooser(self.method, tree.cut(cfg.k_max), expected)
        first = sample(probs(logits[:, 0], cfg.sampling), torch.rand(1, generator=gen).to(device))  # [1]
        out = [int(first)]
        stats.time_prefill_s = time.perf_counter() - t_start
        finish, _ = self._emit(out, 0, cfg, on_tokens)

        while finish is None:
            budget = cfg.max_new_tokens - len(out)            # tokens still allowed, the recovered/bonus one included
            t0 = time.perf_counter()
            proposal = Proposal([])
            k = auto.next_k() if auto is not None else cfg.longest_draft
            if self.proposer is not None and budget > 1 and k > 0:
                proposal = self.proposer.propose(prompt + out, min(k, budget - 1), cfg.sampling, gen)
            t1 = time.perf_counter()
            verify = self._verify if proposal.tree is None else self._verify_tree
            accepted, next_token = verify(out[-1], proposal, cfg, gen)
            stats.time_draft_s += t1 - t0
            stats.time_verify_s += time.perf_counter() - t1
            before = len(out)
            out.extend(accepted + [next_token])
            finish, produced = self._emit(out, before, cfg, on_tokens)
            depth = len(proposal.tokens) if proposal.tree is None else proposal.tree.depth
            stats.record_cycle(len(proposal.tokens), len(accepted), produced, depth)
            if auto is not None:
                auto.update(min(len(accepted) + 1, depth), len(accepted))

        stats.new_tokens = len(out)
        stats.time_total_s = time.perf_counter() - t_start
        return Generation(out, stats, finish)

    def _verify(self, newest: int, proposal: Proposal, cfg: GenerationConfig, gen: torch.Generator):
        """One target pass over [newest, draft...]; accept a prefix; leave the cache holding what was kept."""
        device, k = self.target.device, len(proposal.tokens)
        start = self.cache.length
        tokens = torch.tensor([[newest] + proposal.tokens], device=device)        # [1, k+1]
        positions = torch.arange(start, start + k + 1, device=device)[None]       # [1, k+1]
        hidden = self.target(tokens, positions, self.cache)                       # [1, k+1, D]
        p = probs(self.target.logits(hidden), cfg.sampling)                       # [1, k+1, V]
        q = None if proposal.q is None else proposal.q[None]                      # [1, k, V]
        u_accept = torch.rand(1, k, generator=gen).to(device)
        u_final = torch.rand(1, generator=gen).to(device)
        num_accepted, next_token = verify_chain(p, q, tokens[:, 1:], u_accept, u_final)
        n = int(num_accepted)
        self.cache.truncate(start + 1 + n)                                         # newest + accepted drafts
        self.cached_tokens.extend([newest] + proposal.tokens[:n])
        if self._observe is not None:
            self._observe(hidden[0, :n + 1])                                       # [n+1, D]
        return proposal.tokens[:n], int(next_token)

    def _verify_tree(self, newest: int, proposal: Proposal, cfg: GenerationConfig, gen: torch.Generator):
        """One target pass over [newest, tree nodes] under the ancestry mask; keep the accepted path."""
        device, tree = self.target.device, proposal.tree
        start, n = self.cache.length, tree.size
        tokens = torch.tensor([[newest] + proposal.tokens], device=device)        # [1, 1+n]
        positions = (start + torch.tensor(tree.depths, device=device))[None]      # [1, 1+n]
        mask = torch.cat([torch.ones(1 + n, start, dtype=torch.bool, device=device),
                          tree.ancestry.to(device)], 1)[None]                      # [1, 1+n, start+1+n]
        hidden = self.target(tokens, positions, self.cache, mask)                 # [1, 1+n, D]
        p = probs(self.target.logits(hidden), cfg.sampling)[0]                     # [1+n, V]
        u_accept = torch.rand(1 + n, generator=gen)
        u_final = torch.rand((), generator=gen)
        if cfg.acceptance == "typical":                                            # LOSSY
            path, next_token = verify_tree_typical(p, proposal.tokens, tree, u_final)
        else:
            path, next_token = verify_tree(p, proposal.q, proposal.tokens, tree, u_accept, u_final)
        self.cache.compact(start, torch.tensor([0] + path))                        # newest + accepted path
        accepted = [proposal.tokens[i - 1] for i in path]
        self.cached_tokens.extend([newest] + accepted)
        if self._observe is not None:
            self._observe(hidden[0, [0] + path])                                   # [1+len(path), D]
        return accepted, next_token

    @staticmethod
    def _emit(out: list[int], before: int, cfg: GenerationConfig, on_tokens) -> tuple[str | None, int]:
        """Cut `out` at a stop token or the length budget and report the new tokens.

        Returns (why generation finished or None, tokens the model produced this cycle, a stop token included).
        """
        finish, produced = None, len(out) - before
        for i in range(before, len(out)):
            if out[i] in cfg.stop_token_ids:
                del out[i:]
                finish, produced = "stop", i + 1 - before
                break
        if finish is None and len(out) >= cfg.max_new_tokens:
            del out[cfg.max_new_tokens:]
            finish, produced = "length", len(out) - before
        if on_tokens is not None and len(out) > before:
            on_tokens(out[before:])
        return finish, produced
