"""Prompt lookup (n-gram) proposer: no model at all.

Find the most recent earlier occurrence of the context's last n tokens (n from `max_ngram` down to `min_ngram`) and
propose the tokens that followed it. It pays off whenever the output quotes its input: summaries, edits, code.
The proposal is deterministic, so q is one-hot at each proposed token (the verifier treats `q=None` that way).

Tree proposers take the lookup too (`--tree SHAPE+ngram`, `lookup_first`): a long, unambiguous repeat is copied
alone, a chain in place of the tree; any other match is grafted onto the tree as one more path, as far as this
request's earlier paths held (`LookupRates`).
"""
from __future__ import annotations

import torch

from ..errors import VerispecError
from ..sampling import SamplingConfig
from ..tree import TokenTree, build_tree
from .base import Proposal, Proposer


SURE = 6    # a suffix of this many tokens seen before: tree proposers verify its continuation alone (lookup_first)


class NgramProposer(Proposer):
    name = "ngram"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise VerispecError(f"n-gram sizes must satisfy 1 <= min <= max, got {min_ngram}..{max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def prepare(self, capacity: int) -> None:
        pass

    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator, tree: TokenTree | None = None) -> Proposal:
        return Proposal(lookup(context, k, self.max_ngram, self.min_ngram))


def lookup(context: list[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Tokens that followed the latest earlier match of the longest matching suffix n-gram (k of them, `follow`)."""
    ids = torch.tensor(context, dtype=torch.long)
    length = ids.numel()
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        windows = ids[:length - 1].unfold(0, n, 1)            # [length - n, n]: every n-gram but the suffix itself
        hits = (windows == ids[length - n:]).all(-1).nonzero()
        if hits.numel():
            return follow(ids, int(hits[-1]) + n, k)        # continuation of the most recent match
    return []


def follow(ids: torch.Tensor, start: int, k: int) -> list[int]:
    """The k tokens from ids[start] on; one that runs into the newest token repeats with the match's period (a
    loop in the output is copied k tokens ahead, not only to its end)."""
    period = ids[start:].tolist()
    return (period * -(-k // len(period)))[:k]


def graft(proposal: Proposal, chain: list[int]) -> Proposal:
    """A tree proposal with `chain` (deterministic picks, such as an n-gram continuation) merged in as one more
    root-to-leaf path: it follows the tree's nodes while their tokens agree, then adds new nodes, each its
    parent's next-ranked child. Siblings stay distinct tokens and every node is still a deterministic pick (q is
    None), so greedy and recursive rejection sampling verify the merged tree exactly as they verify the tree."""
    if proposal.tree is None or proposal.q is not None:
        raise ValueError("graft merges a chain into a tree of deterministic picks")
    by_path = dict(zip(proposal.tree.choices, proposal.tokens))
    kids: dict[tuple, dict[int, tuple]] = {}                       # parent path -> {token: child path}
    for path, token in by_path.items():
        kids.setdefault(path[:-1], {})[token] = path
    node = ()
    for token in chain:
        siblings = kids.setdefault(node, {})
        if token not in siblings:
            siblings[token] = node + (1 + max((c[-1] for c in siblings.values()), default=-1),)
            by_path[siblings[token]] = token
        node = siblings[token]
    tree = build_tree(list(by_path))
    return Proposal([by_path[c] for c in tree.choices], None, tree)


def longest_match(context: list[int], k: int, cap: int = 32) -> tuple[int, list[int], bool]:
    """(n, continuation, agreed): the longest suffix of `context` (n <= cap tokens) that occurred earlier, the k
    tokens that followed its most recent earlier occurrence (`follow`), and whether every earlier occurrence was
    followed by the same token. (0, [], False) when the newest token is new."""
    ids = torch.tensor(context, dtype=torch.long)                        # [length]
    last = ids.numel() - 1
    ends = (ids[:last] == ids[last]).nonzero().flatten()                 # where earlier matches of 1 token end
    n, best = 0, ends
    while ends.numel() and n < cap:
        n, best = n + 1, ends
        ends = ends[ends >= n]                                           # matches that can grow one token left
        ends = ends[ids[ends - n] == ids[last - n]]
    if n == 0:
        return 0, [], False
    start = int(best[-1]) + 1
    return n, follow(ids, start, k), bool((ids[best + 1] == ids[start]).all())


# A grafted lookup path keeps its positions while the chance that all of them hold, by the rates this request has
# measured so far (`LookupRates`), stays at least CUTOFF: each grafted node is one more row of the target's pass, and
# on a long context every row attends over thousands of keys (session 41: EAGLE's 4-node tree plus a 6-token path
# cost 2.2 plain steps after 2,600 tokens, its 5 rows alone 1.4; on code-review prompts a path gave 0.4-0.7 tokens).
# 0.3 against whole paths, long prompts: 1.06-1.11x -> 1.14-1.15x plain's decoding; development prompts: the same.
CUTOFF = 0.3


class LookupRates:
    """How far this request's grafted lookup paths hold, position by position: at position i, the running rate at
    which the path's token was the one that came next, given the ones before it were (each rate starts at PRIOR,
    worth WEIGHT observations; older observations fade by FORGET a path). It learns from the context alone (what
    followed the last path), so the proposals stay a function of the context and verification stays exact."""

    PRIOR, WEIGHT, FORGET = 0.8, 2.0, 0.9

    def __init__(self, longest: int):
        self.longest = longest                              # the proposer's cap on a path (0: no lookup path)
        self.hits = [self.PRIOR * self.WEIGHT] * longest
        self.seen = [self.WEIGHT] * longest
        self.last: tuple[int, list[int]] | None = None      # (context length, path): the latest path grafted

    def length(self) -> int:
        """How many positions a path keeps now: while the product of the rates stays at least CUTOFF."""
        held, n = 1.0, 0
        for hits, seen in zip(self.hits, self.seen):
            held *= hits / seen
            if held < CUTOFF:
                break
            n += 1
        return n

    def learn(self, context: list[int]) -> None:
        """Score the latest path against what followed it in `context`."""
        if self.last is None:
            return
        start, path = self.last
        self.last = None
        for i, (token, came) in enumerate(zip(path, context[start:])):
            hit = token == came
            self.hits[i] = self.FORGET * self.hits[i] + hit
            self.seen[i] = self.FORGET * self.seen[i] + 1
            if not hit:
                break


def lookup_first(context: list[int], k: int, draft, rates: LookupRates) -> Proposal:
    """A tree proposer's proposal with the prompt-lookup path (`--tree SHAPE+ngram`, rates.longest > 0): where the
    context's last SURE or more tokens occurred before, each time followed by the same token, the continuation of
    its latest match alone, as a chain of up to k deterministic picks (`draft`, the proposer's own tree, is not
    drafted: the copy is likelier and its verification cheaper); else `draft()` with the lookup path grafted on, as
    far as this request's `rates` say it holds. Either way a function of the context alone, so verification stays
    exact."""
    rates.learn(context)
    if rates.longest:
        n, chain, agreed = longest_match(context, k)
        if n >= SURE and agreed:
            return Proposal(chain)
    size = min(k, rates.longest, rates.length())
    chain = lookup(context, size, min_ngram=2) if size else []     # a suffix of at least 2 tokens
    proposal = draft()
    if not chain:
        return proposal
    rates.last = (len(context), chain)
    return graft(proposal, chain)
