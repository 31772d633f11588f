"""The one protocol every proposer implements: guess up to k next tokens for a sequence.

A proposer returns its draft tokens and, where it has them, the probabilities q it drew them from. The verifier
needs nothing else. Proposers keep whatever state they like (a draft model keeps a KV cache) but must accept any
context: after a cycle the sequence may have diverged from what they drafted, and they resynchronise themselves.

A proposer that drafts from the target's own features (Medusa, EAGLE) sets `reads_features` and defines
`observe(hidden)`: after the prefill and after every verification the engine passes it the target's final hidden
states [m, D] of the positions it kept; the last row is the state the newest token was drawn from. Tree
proposers set `makes_trees`, and a static tree's proposer its `tree`.

A batch gives every sequence its own proposer: `fork()` shares the weights and starts the per-sequence state
afresh (the default copies the proposer; one with per-sequence state overrides it).
"""
from __future__ import annotations

import copy

import torch

from ..model.host import upload
from ..sampling import SamplingConfig
from ..tree import TokenTree


class Proposal:
    """Draft tokens, as a chain (tree is None) or as the nodes of a token tree.

    Row j of q is the distribution drawn from at node j (node 0 is the newest emitted token): for a chain, the
    distribution token j + 1 was drawn from; for a tree, the one node j's children were drawn from, i.i.d.
    q None means the drafts are deterministic picks (q one-hot at each), as for n-gram or top-k choices.

    A proposer that drafts on the device may leave its tokens there (`on_device`): the target's pass reads them
    from there, and the engine reads them back together with the verification's result (`read_with`), one read
    a cycle (on a GPU each read waits for the work queued before it). `tokens` reads them back on first use.
    """

    def __init__(self, tokens: list[int] | None = None, q: torch.Tensor | None = None, tree: TokenTree | None = None,
                 on_device: torch.Tensor | None = None):
        self._tokens = [] if tokens is None and on_device is None else tokens   # chain: x_1..x_k' (k' <= k,
                                                                                 # maybe 0); tree: node 1..n tokens
        self.q = q                      # chain: [k', vocab]; tree: [1 + n, vocab]
        self.tree = tree                # the tree the tokens fill, breadth-first (verispec.tree)
        self.on_device = on_device      # [n] int64: the tokens on the model's device, or None

    @property
    def size(self) -> int:
        """How many draft tokens, read back or not."""
        return len(self._tokens) if self._tokens is not None else self.on_device.numel()

    @property
    def tokens(self) -> list[int]:
        if self._tokens is None:
            self._tokens = self.on_device.tolist()                              # a read (a wait, on a GPU)
        return self._tokens

    def read_with(self, *values: torch.Tensor) -> list[torch.Tensor]:
        """`values` on the host, and this proposal's tokens if still on the device, in one read. Each travels as
        its raw bytes (padded to 8), so every dtype comes back exactly."""
        parts = list(values) + ([self.on_device] if self._tokens is None else [])
        if not parts:
            return []
        raw, starts, at = [], [], 0
        for v in parts:
            b = v.contiguous().reshape(-1).view(torch.uint8)
            pad = -b.numel() % 8                                                  # each part starts 8-aligned
            raw += [b, b.new_zeros(pad)]
            starts.append(at)
            at += b.numel() + pad
        flat = torch.cat(raw).cpu()
        out = [flat[a:a + v.numel() * v.element_size()].view(v.dtype).view(v.shape) for v, a in zip(parts, starts)]
        if self._tokens is None:
            self._tokens = out.pop().tolist()
        return out

    def __eq__(self, other) -> bool:
        return isinstance(other, Proposal) and self.tokens == other.tokens and self.tree == other.tree and (
            self.q is other.q or (self.q is not None and other.q is not None and torch.equal(self.q, other.q)))

    __hash__ = None

    def __repr__(self) -> str:
        return f"Proposal({self.tokens}, q={'None' if self.q is None else list(self.q.shape)}, tree={self.tree})"


class Proposer:
    """The one protocol every proposer implements: subclass it and override what applies. The engine, the
    serving batch, auto k, bench and profile read these attributes and call these methods, and nothing else."""
    name: str = "proposer"
    tree: TokenTree | None = None       # a static tree every proposal fills (None: chains and dynamic trees)
    makes_trees: bool = False           # proposals are token trees, static or dynamic (tree verification,
                                        # typical acceptance, the tree cost model)
    max_nodes: int = 0                  # the most draft nodes one proposal holds (a static tree's size, a dynamic
                                        # tree's bound, plus a grafted n-gram path); chains: 0 (k bounds them)
    graft: int = 0                      # of those, the most a grafted n-gram path adds (present only where the
                                        # context repeats)
    reads_features: bool = False        # `observe` wants the target's hidden states (Medusa, EAGLE)
    expected_accepted: float | None = None   # E[accepted tokens per cycle] at T = 0 (a tree whose proposer's
                                             # acceptance was measured): auto k's prior yield for the tree
    node_reach: dict[tuple[int, ...], float] | None = None   # a static tree's: per node (its path of ranks), the
                                        # chance at T = 0 that a cycle's accepted path holds it (auto k cuts the
                                        # tree each cycle to its likeliest nodes, as many as pay)
    drafts_by_depth: bool = True        # drafting a static tree takes a pass per depth (a cut tree costs its share),
                                        # not one for the whole tree (Medusa's heads)
    draft_together = None               # callable(jobs) drafting many sequences in packed passes (serve.batch)

    def prepare(self, capacity: int) -> None:
        """Called before each generation: sequences will hold at most `capacity` tokens."""

    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator, tree: TokenTree | None = None) -> Proposal:
        """Guess up to k tokens (a chain of at most k, or a tree at most k deep) following `context`. A static
        tree's proposer fills `tree`, a subtree of its own (auto k's cut this cycle), where one is given; else its
        tree cut to depth k. Chains and dynamic trees ignore it."""
        raise NotImplementedError

    def observe(self, hidden: torch.Tensor) -> None:
        """hidden: [m, D] the target's final hidden states at the positions kept this cycle (reads_features)."""

    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache this proposer keeps per token of a sequence (a draft model's, an EAGLE head's caches):
        what the server's KV budget charges beside the target's."""
        return 0

    def behind(self, context: list[int]) -> int:
        """Tokens of `context` the proposer would have to read before drafting after it (a draft model's catch-up
        on what was decoded while it sat idle); auto k charges them to a probe."""
        return 0

    def fork(self) -> "Proposer":
        """A proposer for one more concurrent sequence: the same weights, its own per-sequence state."""
        return copy.copy(self)


def fork(proposer: Proposer | None) -> Proposer | None:
    return None if proposer is None else proposer.fork()


def widen(q: torch.Tensor, head_ids: torch.Tensor | None, vocab: int) -> torch.Tensor:
    """q [k, H] over a reduced output head's tokens `head_ids` -> [k, vocab], 0 outside the head (the verifier's
    residual norm(max(0, p - q)) then covers those tokens). No head_ids: q is already over the vocabulary."""
    if head_ids is None:
        return q
    return q.new_zeros(len(q), vocab).index_copy_(1, head_ids, q)


def _by_width(widths: list[int]) -> dict[int, list[int]]:
    """Rows grouped by width, in order of first appearance: rows of one width share one `topk` call (a narrower
    `topk` of a wider one could order exact ties differently)."""
    groups: dict[int, list[int]] = {}
    for r, w in enumerate(widths):
        groups.setdefault(w, []).append(r)
    return groups


def _select(rows: list[int], device) -> slice | torch.Tensor:
    """What picks `rows` out of a scores tensor without a wait for the device: a slice where they are consecutive,
    else an index uploaded asynchronously (indexing by a list copies it to the device and waits)."""
    if rows == list(range(rows[0], rows[-1] + 1)):
        return slice(rows[0], rows[-1] + 1)
    return upload(rows, device)


def top_choices(scores: torch.Tensor, widths: list[int]) -> list[list[tuple[float, int]]]:
    """Each row's `widths[r]` best (score, index) pairs, best first: scores [m, H] -> m lists. Everything comes
    back to the host in one read (on a GPU each read waits for the work queued before it)."""
    groups = _by_width(widths)
    parts = []
    for w, rows in groups.items():
        top = scores[_select(rows, scores.device)].topk(w)                      # [len(rows), w]
        parts.append(torch.cat([top.values.float(), top.indices.float()], -1).flatten())   # ids < 2^24: exact
    flat = torch.cat(parts).tolist() if parts else []
    out: list = [None] * len(widths)
    at = 0                                                                     # row r's w scores, then w indices
    for w, rows in groups.items():
        for r in rows:
            out[r] = [(flat[at + j], int(flat[at + w + j])) for j in range(w)]
            at += 2 * w
    return out


def rank_plan(widths: list[int], device) -> tuple[list[tuple[int, slice | torch.Tensor]], list[int]]:
    """How `ranked` ranks rows of these widths: (groups, at), groups [(w, rows' selector)], and row r's j-th best
    index lands at flat[at[r] + j]. A plan made once serves every call (a captured graph's too)."""
    groups, at, offset = [], [0] * len(widths), 0
    for w, rows in _by_width(widths).items():
        groups.append((w, _select(rows, device)))
        for j, r in enumerate(rows):
            at[r] = offset + j * w
        offset += len(rows) * w
    return groups, at


def ranked(scores: torch.Tensor, groups: list[tuple[int, slice | torch.Tensor]]) -> torch.Tensor:
    """scores [m, H] -> the rows' best indices by `rank_plan`'s groups, flat, on the device."""
    return torch.cat([scores[sel].topk(w).indices.flatten() for w, sel in groups])


def top_indices(scores: torch.Tensor, widths: list[int]) -> tuple[torch.Tensor, list[int]]:
    """`top_choices`' indices, left on the device: (flat, at), where row r's j-th best index is flat[at[r] + j].
    The same indices, in the same order, as `top_choices` gives."""
    groups, at = rank_plan(widths, scores.device)
    return ranked(scores, groups), at


def reserve(proposer: Proposer | None, longest_draft: int) -> int:
    """Cache rows a sequence keeps past its prompt and output: the most tokens one proposal may hold (a chain's k,
    a static tree's size, a dynamic tree's or a grafted n-gram path's bound), and one."""
    if proposer is None:
        return 1
    return max(longest_draft, proposer.tree.size if proposer.tree is not None else 0, proposer.max_nodes) + 1
