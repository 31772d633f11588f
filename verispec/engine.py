"""The decoding loop: plain autoregressive decoding and speculative decoding are one loop.

Invariant: the target's KV cache holds every token of the sequence except the newest one. Each cycle
  1. the proposer drafts up to k tokens (none for plain decoding),
  2. one target pass scores [newest token, draft tokens] -> p at k + 1 positions,
  3. `verify_chain` accepts a prefix and draws the recovered or bonus token,
  4. the cache is truncated to the accepted prefix.
With no proposer, step 3 simply samples from p: plain decoding uses the very same sampler. A `Sequence` is one
generation in progress; each cycle it plans its target pass (`plan`) and then finishes the cycle from that pass's
hidden states (`finish`). `Engine.generate` runs one sequence; the serving batch (`verispec.serve.batch`) runs
many and packs their target passes into one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from .autok import CostProfile
from .autotree import AutoCut
from .errors import VerispecError
from .generation import Generation, GenerationConfig
from .model import ops
from .model.host import upload
from .model.llama import Llama
from .model.rows import RowPlan
from .proposers.base import Proposal, Proposer, reserve
from .sampling import SamplingConfig, probs, sample, top_tokens
from .stats import GenerationStats
from .verify import greedy_chain, greedy_tree, tree_draws, verify_chain, verify_tree, verify_tree_typical


@dataclass
class Pass:
    """One cycle's target pass, as a sequence plans it: [newest token, draft tokens] at their positions."""
    proposal: Proposal
    tokens: torch.Tensor                # [1, 1+n]
    positions: torch.Tensor             # [1, 1+n]
    mask: RowPlan | None                # a tree's ancestry, its rows planned (`tree_rows`); None: a causal chain
    start: int                          # the cache's length before the pass
    newest: int                         # tokens[0, 0], kept on the host (reading it back would wait for the device)

    def inputs(self, cache) -> tuple:
        """The target's forward arguments for this pass."""
        return self.tokens, self.positions, cache, self.mask


_TREE_ROWS: dict[tuple, RowPlan] = {}


def tree_rows(tree) -> RowPlan:
    """A tree pass's rows: every row sees the context, then its ancestors (`tree.ancestry`), planned once per tree
    shape (a static tree's is the same every cycle; at most 256 shapes are kept)."""
    rows = _TREE_ROWS.get(tree.choices)
    if rows is None:
        if len(_TREE_ROWS) >= 256:
            _TREE_ROWS.clear()
        rows = _TREE_ROWS[tree.choices] = RowPlan(1 + tree.size, tree.ancestry)
    return rows


# Trees of more rows than this compute p where verification reads it (`NodeProbs`); smaller ones all at once, which
# costs about what a few single rows cost (scripts/tree_verify_speed.py: EAGLE trees of 5-11 rows, 1.66 s against
# 1.74 s with NodeProbs; 33 rows 13.6 ms a pass against 5.6; 65 rows 26.6 against 6.4)
LAZY_ROWS = 16


class NodeProbs:
    """p at a token tree's root and nodes, [1+n, V] as `verify_tree` reads it (row by row), each row's output head
    computed when first read: the node and its first-choice descendants in one product. Verification reads only the
    accepted path and the nodes it tries on the way, so most rows of a big tree never pay for the head (a sixth of
    a row's cost on the default model). The head is row-invariant, so every row has the bits it has computed with
    all the others."""

    def __init__(self, target: Llama, hidden: torch.Tensor, tree, sampling: SamplingConfig):
        self.target, self.hidden, self.tree, self.sampling = target, hidden, tree, sampling      # hidden [1+n, D]
        self.rows: dict[int, torch.Tensor] = {}

    def __getitem__(self, node: int) -> torch.Tensor:
        if node not in self.rows:
            line = [node]
            while children := self.tree.children(line[-1]):
                line.append(children[0])                                            # rank 0: the first choice
            p = probs(self.target.logits(self.hidden[line]), self.sampling)          # [len(line), V]
            self.rows.update(zip(line, p))
        return self.rows[node]


class _Top:
    """The target's token at a tree's nodes, from `NodeProbs` on demand: its argmax (u None: p is one-hot at
    temperature 0), or its draw with uniform u[node] (`verify_tree_drawn`)."""

    def __init__(self, p: NodeProbs, u: torch.Tensor | None = None):
        self.p, self.u = p, u

    def __getitem__(self, node: int) -> int:
        return int(top_tokens(self.p[node]) if self.u is None else tree_draws(self.p[node], self.u[node]))


def check_fits(prompt: int, max_new_tokens: int, limit: int, name: str = "") -> None:
    """A one-line error where a prompt of `prompt` tokens (`name`d, if given) and `max_new_tokens` more do not fit a
    context of `limit` tokens."""
    if prompt + max_new_tokens > limit:
        raise VerispecError(f"prompt{' ' + name if name else ''} ({prompt} tokens) plus max-new-tokens "
                            f"({max_new_tokens}) exceeds the model's context of {limit} tokens")


class Sequence:
    """One generation in progress: its output, KV cache, proposer, random stream, automatic-k state and stats."""

    def __init__(self, target: Llama, proposer: Proposer | None, prompt: list[int], cfg: GenerationConfig,
                 profile: CostProfile, on_tokens: Callable[[list[int]], None] | None = None):
        if not prompt:
            raise VerispecError("the prompt is empty")
        self.target, self.proposer, self.prompt, self.cfg, self.on_tokens = target, proposer, prompt, cfg, on_tokens
        if cfg.acceptance == "typical" and (proposer is None or not proposer.makes_trees):
            raise VerispecError("typical acceptance needs a tree: draft-tree, medusa, or eagle with --tree")
        limit = target.cfg.max_position
        if proposer is not None and cfg.longest_draft + 1 > limit // 2:     # (plain decoding drafts nothing)
            raise VerispecError(f"k = {cfg.longest_draft} is too large for a context of {limit} tokens")
        check_fits(len(prompt), cfg.max_new_tokens, limit)
        # room for the widest pass past the output; where the context ends sooner, a tree waits (`draft_length`)
        self.capacity = min(limit, len(prompt) + cfg.max_new_tokens + reserve(proposer, cfg.longest_draft))
        # proposers that draft from the target's own features (Medusa) hear the hidden states of kept positions
        self._observe = proposer.observe if proposer is not None and proposer.reads_features else None
        self.features: list[torch.Tensor] | None = None   # [] keeps every cached position's hidden states [m, D]
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.stats = GenerationStats(prompt_tokens=len(prompt), lossy=cfg.acceptance == "typical")
        self.cache, self.cached_tokens = None, []   # cached_tokens: tokens whose keys/values are in self.cache
        self.out: list[int] = []
        self.finish_reason: str | None = None
        # k = "auto": chains choose k every cycle; a static tree is cut each cycle to the subtree predicted fastest;
        # a dynamic tree, or a static one with a grafted n-gram path, is verified whole or not at all
        self.auto = None if cfg.k != "auto" or proposer is None else \
            profile.chooser_for(proposer, cfg.k_max, cfg.sampling.temperature > 0)
        self._t_start = time.perf_counter()

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @torch.inference_mode()
    def prefill(self, cache=None, cached_tokens: list[int] = (), hidden: torch.Tensor | None = None,
                known: torch.Tensor | None = None) -> None:
        """Fill a cache with the prompt (reusing `cache` and the prefix it shares with `cached_tokens`, if given)
        and draw the first token. hidden: the whole prompt's hidden states [1, n, D], its keys and values already
        in `cache` (runs of one prompt sharing one prefill, as `audit`'s do): only the output head runs. known:
        the hidden states [len(cached_tokens), D] of `cached_tokens`, heard for the reused prefix."""
        if self.proposer is not None:
            self.proposer.prepare(self.capacity)
        keep, known_tokens = 0, cached_tokens if cache is not None else ()
        for a, b in zip(known_tokens, self.prompt[:-1] if hidden is None else self.prompt):
            if a != b:
                break
            keep += 1
        if cache is None or cache.capacity < self.capacity:     # too small: the kept prefix moves to a new one
            cache, old = self.target.new_cache(self.capacity), cache
            if keep:
                cache.load(*old.prefix(keep))
        if hidden is not None and keep < len(self.prompt):
            raise ValueError("prefilling from given hidden states needs the whole prompt cached")
        cache.truncate(keep)
        self.cache, self.cached_tokens = cache, list(self.prompt)
        if known is not None and keep:
            self.heard(known[:keep])
        if hidden is None:
            device, prompt = self.target.device, self.prompt
            tokens = upload([prompt[keep:]], device)                              # [1, n]
            positions = torch.arange(keep, len(prompt), device=device)[None]      # [1, n]
            hidden = self.target(tokens, positions, cache)                        # [1, n, D]
        self.heard(hidden[0])
        logits = self.target.logits(hidden[:, -1:])                               # [1, 1, vocab]
        self.stats.target_passes = 1
        u = upload(torch.rand(1, generator=self.gen), self.target.device)
        first = sample(probs(logits[:, 0], self.cfg.sampling), u)
        self.out.append(int(first))
        self.stats.time_prefill_s = time.perf_counter() - self._t_start
        self._emit(0)

    def draft_length(self) -> int:
        """How many tokens to draft this cycle (0: decode plainly); consults automatic k, once per cycle."""
        budget = self.cfg.max_new_tokens - len(self.out)   # tokens still allowed, the recovered/bonus one included
        if self.auto is None:
            k = self.cfg.longest_draft
        else:       # a probe after idling makes a draft model catch up on the tokens it missed: auto k charges it
            k = self.auto.next_k(self.proposer.behind(self.context()), budget)    # (auto exists only with a proposer)
        if self.proposer is None or budget <= 1 or k <= 0:
            return 0
        k = min(k, budget - 1)             # (a chain of k then fits: the cache holds prompt + max_new_tokens)
        room = self.capacity - len(self.prompt) - len(self.out)     # rows a pass may verify past the newest token
        if self.proposer.makes_trees and reserve(self.proposer, k) - 1 > room:   # the context's end is near
            return 0                                                 # a tree wider than what is left waits
        return k

    def context(self) -> list[int]:
        return self.prompt + self.out

    @torch.inference_mode()
    def plan(self, k: int, proposal: Proposal | None = None) -> Pass:
        """Draft k tokens (unless `proposal` brings them, drafted together with other sequences) and lay out
        the target pass that checks them."""
        t0 = time.perf_counter()
        cfg, device, newest = self.cfg, self.target.device, self.out[-1]
        if proposal is None:    # (`tree`: auto k's cut of a static tree, only where there is one)
            cut = {"tree": self.auto.tree_for(k)} if k and isinstance(self.auto, AutoCut) else {}
            proposal = self.proposer.propose(self.context(), k, cfg.sampling, self.gen, **cut) if k else Proposal([])
        start, tree = self.cache.length, proposal.tree
        if proposal.on_device is not None:                  # drafted on the device: the pass reads them there
            tokens = torch.cat([upload([newest], device), proposal.on_device.to(device)])[None]   # [1, 1+n]
        else:
            tokens = upload([[newest] + proposal.tokens], device)                 # [1, 1+n]
        mask = None
        if tree is None:
            positions = torch.arange(start, start + tokens.shape[1], device=device)[None]   # [1, 1+n]
        else:
            positions = (start + upload(tree.depths, device))[None]                        # [1, 1+n]
            mask = tree_rows(tree)                          # its ancestry [1+n, 1+n], after the context
        self.stats.time_draft_s += time.perf_counter() - t0
        return Pass(proposal, tokens, positions, mask, start, newest)

    @torch.inference_mode()
    def finish(self, step: Pass, hidden: torch.Tensor, logits: torch.Tensor | None = None) -> list[int]:
        """Accept from the target's hidden states [1, 1+n, D] of `step` (and their logits [1, 1+n, V], if the
        caller computed them already); return the tokens this cycle emitted."""
        proposal = step.proposal
        if proposal.tree is None:
            accepted, next_token = self._verify_chain(step, hidden,
                                                      self.target.logits(hidden) if logits is None else logits)
        else:
            accepted, next_token = self._verify_tree(step, hidden, logits)
        before = len(self.out)
        self.out.extend(accepted + [next_token])
        produced = self._emit(before)
        depth = proposal.size if proposal.tree is None else proposal.tree.depth
        kept = min(len(accepted), produced)          # a stop token may end the output inside the accepted drafts
        self.stats.record_cycle(proposal.size, kept, produced, depth, cut=kept < len(accepted))
        if self.auto is not None:
            self.auto.update(min(len(accepted) + 1, depth), len(accepted), proposal.size,
                             drafted=proposal.tree is not None)      # a lookup chain in a tree's place: no drafting
        return self.out[before:]

    def result(self) -> "Generation":
        self.stats.new_tokens = len(self.out)
        self.stats.time_total_s = time.perf_counter() - self._t_start
        return Generation(self.out, self.stats, self.finish_reason)

    def _verify_chain(self, step: Pass, hidden: torch.Tensor, logits: torch.Tensor):
        """Accept a prefix of the chain; leave the cache holding what was kept."""
        proposal, device, k = step.proposal, self.target.device, step.proposal.size
        if self.cfg.sampling.greedy:              # p one-hot: the rule reduces to matching the argmax
            top, = proposal.read_with(top_tokens(logits[0]))                      # one read a cycle
            n, next_token = greedy_chain(top.tolist(), proposal.tokens)
        else:
            p = probs(logits, self.cfg.sampling)                                   # [1, k+1, V]
            q = None if proposal.q is None else proposal.q[None]                  # [1, k, V]
            u_accept = upload(torch.rand(1, k, generator=self.gen), device)
            u_final = upload(torch.rand(1, generator=self.gen), device)
            num_accepted, next_token = verify_chain(p, q, step.tokens[:, 1:], u_accept, u_final)
            n, next_token = proposal.read_with(torch.cat([num_accepted, next_token]))[0].tolist()   # one read
        self.cache.truncate(step.start + 1 + n)                                    # newest + accepted drafts
        self.cached_tokens.extend([step.newest] + proposal.tokens[:n])
        self.heard(hidden[0, :n + 1])                                              # [n+1, D]
        return proposal.tokens[:n], int(next_token)

    def _verify_tree(self, step: Pass, hidden: torch.Tensor, logits: torch.Tensor | None):
        """Accept a root-to-node path of the tree; keep only that path in the cache. Without `logits`, exact
        acceptance of a big tree on the row-invariant kernels computes p only at the nodes it reads (`NodeProbs`)."""
        proposal, tree, cfg = step.proposal, step.proposal.tree, self.cfg
        exact = cfg.acceptance == "exact"
        greedy = cfg.sampling.greedy and exact
        iid = proposal.q is not None and not greedy       # children drawn from q: the general rule, on the host
        lazy = logits is None and 1 + tree.size > LAZY_ROWS and exact
        u = u_final = None
        if not greedy:
            u = torch.rand(1 + tree.size, generator=self.gen)                     # [1+n] one per node
            u_final = torch.rand((), generator=self.gen)
        top = p = None
        if lazy and ops.invariant(hidden):
            p = NodeProbs(self.target, hidden[0], tree, cfg.sampling)             # [1+n, V], row by row
            top = None if iid else _Top(p, u)
        else:
            logits = self.target.logits(hidden) if logits is None else logits    # [1, 1+n, V]
            if greedy:                            # p one-hot: the rule reduces to following the argmax
                top = proposal.read_with(top_tokens(logits[0]))[0].tolist()       # one read a cycle
            elif exact and not iid:               # one draw a node (`verify_tree_drawn`), read back at once
                draws = tree_draws(probs(logits, cfg.sampling)[0], upload(u, hidden.device))   # [1+n]
                top = proposal.read_with(draws)[0].tolist()
            else:                                 # the rule reads p node by node: on the host, read at once
                p, = proposal.read_with(probs(logits, cfg.sampling)[0])           # [1+n, V]
        if top is not None:
            path, next_token = greedy_tree(top, proposal.tokens, tree)
        elif not exact:                                                            # LOSSY
            path, next_token = verify_tree_typical(p, proposal.tokens, tree, u_final)
        else:
            path, next_token = verify_tree(p, proposal.q.cpu(), proposal.tokens, tree, u, u_final)
        kept = torch.tensor([0] + path)                                            # newest + accepted path
        self.cache.compact(step.start, kept)
        accepted = [proposal.tokens[i - 1] for i in path]
        self.cached_tokens.extend([step.newest] + accepted)
        if self._observe is not None or self.features is not None:
            self.heard(hidden[0].index_select(0, upload(kept, hidden.device)), own=True)   # [1+len(path), D]
        return accepted, next_token

    def heard(self, hidden: torch.Tensor, own: bool = False) -> None:
        """The target's hidden states [m, D] of the next m cached positions: shown to a proposer that reads them,
        and kept in `features` if it is a list (a copy unless `own`: a pass may reuse its output's memory)."""
        if self._observe is not None:
            self._observe(hidden)
        if self.features is not None:
            self.features.append(hidden if own else hidden.clone())

    def cancel(self) -> None:
        """Stop early (a client went away, or a stop string matched)."""
        if self.finish_reason is None:
            self.finish_reason = "cancelled"

    def _emit(self, before: int) -> int:
        """Cut the output at a stop token or the length budget, report the new tokens, and return how many tokens
        the model produced this cycle (a stop token included)."""
        out, cfg = self.out, self.cfg
        produced = len(out) - before
        for i in range(before, len(out)):
            if out[i] in cfg.stop_token_ids:
                del out[i:]
                self.finish_reason, produced = "stop", i + 1 - before
                break
        if self.finish_reason is None and len(out) >= cfg.max_new_tokens:
            del out[cfg.max_new_tokens:]
            self.finish_reason, produced = "length", len(out) - before
        if self.on_tokens is not None and len(out) > before:
            self.on_tokens(out[before:])
        return produced


class Engine:
    def __init__(self, target: Llama, proposer: Proposer | None = None,
                 profile: CostProfile | Callable[[], CostProfile] | None = None):
        """profile: the cost model behind k = "auto" (built-in defaults when None), or a function that makes it,
        called on first need (measuring a machine's costs takes minutes; a fixed k never needs them)."""
        self.target, self.proposer, self._profile = target, proposer, profile or CostProfile()
        self.cache = None
        self.cached_tokens: list[int] = []      # tokens whose keys/values are in self.cache
        self.features: torch.Tensor | None = None   # their hidden states, kept for a proposer that reads them

    @property
    def profile(self) -> CostProfile:
        if callable(self._profile):
            self._profile = self._profile()
        return self._profile

    @property
    def static_tree(self):
        """The token tree a tree proposer fills every cycle; None for chains and plain decoding."""
        return None if self.proposer is None else self.proposer.tree

    @property
    def method(self) -> str:
        return "plain" if self.proposer is None else self.proposer.name

    def sequence(self, prompt: list[int], cfg: GenerationConfig,
                 on_tokens: Callable[[list[int]], None] | None = None) -> Sequence:
        """A new generation with this engine's target, proposer and cost profile (checked, not yet prefilled)."""
        auto = cfg.k == "auto" and self.proposer is not None    # (plain decoding never reads the costs)
        return Sequence(self.target, self.proposer, prompt, cfg, self.profile if auto else CostProfile(), on_tokens)

    @torch.inference_mode()
    def generate(self, prompt: list[int], cfg: GenerationConfig,
                 on_tokens: Callable[[list[int]], None] | None = None, reuse_prefix: bool = False) -> Generation:
        """Generate up to cfg.max_new_tokens tokens after `prompt`; `on_tokens` hears each cycle's new tokens.
        reuse_prefix: keep the keys and values of the prefix this prompt shares with the last one (and, for a
        proposer that reads the target's features, the hidden states at its positions)."""
        seq = self.sequence(prompt, cfg, on_tokens)
        features = reuse_prefix and self.proposer is not None and self.proposer.reads_features
        seq.features = [] if features else None
        known = self.features if features else None     # a last run that kept none: the prefix is not reused
        known_tokens = self.cached_tokens if reuse_prefix and (known is not None or not features) else []
        self.cached_tokens, self.features = [], None    # until this run ends (a failed one leaves nothing to reuse)
        seq.prefill(self.cache, known_tokens, known=known)
        self.cache = seq.cache
        while not seq.done:
            step = seq.plan(seq.draft_length())
            t0 = time.perf_counter()
            hidden = self.target(*step.inputs(seq.cache))                         # [1, 1+n, D]
            seq.finish(step, hidden)
            seq.stats.time_verify_s += time.perf_counter() - t0
        self.cached_tokens = seq.cached_tokens
        self.features = torch.cat(seq.features) if features else None        # [len(cached_tokens), D]
        return seq.result()
