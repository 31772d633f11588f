"""Prompt lookup (n-gram) proposer: no model at all.

Find the most recent earlier occurrence of the context's last n tokens (n from `max_ngram` down to `min_ngram`) and
propose the tokens that followed it. It pays off whenever the output quotes its input: summaries, edits, code.
The proposal is deterministic, so q is one-hot at each proposed token (the verifier treats `q=None` that way).

Tree proposers take the lookup too (`--tree SHAPE+ngram`, `lookup_first`): a long, unambiguous repeat is copied
alone, a chain in place of the tree; any other match is grafted onto the tree as one more path.
"""
from __future__ import annotations

import torch

from ..errors import VerispecError
from ..sampling import SamplingConfig
from ..tree import build_tree
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
                generator: torch.Generator) -> Proposal:
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


def lookup_first(context: list[int], k: int, longest: int, draft) -> Proposal:
    """A tree proposer's proposal with the prompt-lookup path (`--tree SHAPE+ngram`, longest > 0): where the
    context's last SURE or more tokens occurred before, each time followed by the same token, the continuation of
    its latest match alone, as a chain of up to k deterministic picks (`draft`, the proposer's own tree, is not
    drafted: the copy is likelier and its verification cheaper); else `draft()` with the lookup path grafted on.
    Either way a function of the context alone, so verification stays exact."""
    if longest:
        n, chain, agreed = longest_match(context, k)
        if n >= SURE and agreed:
            return Proposal(chain)
    return with_lookup_path(draft(), context, k, longest)


def with_lookup_path(proposal: Proposal, context: list[int], k: int, longest: int) -> Proposal:
    """A tree proposer's `proposal` with the prompt-lookup continuation of `context` grafted on (`--tree
    SHAPE+ngram`): a suffix of at least 2 tokens, at most min(k, longest) tokens. Unchanged when longest is 0 or
    nothing matches."""
    chain = lookup(context, min(k, longest), min_ngram=2) if longest else []
    return graft(proposal, chain) if chain else proposal
