"""The accept rule: modified rejection sampling over a chain of draft tokens.

Speculative sampling (Leviathan et al., 2023; Chen et al., 2023). Vocabulary, used everywhere in verispec:
- p: the target's distribution at a position, q: the draft's, both after temperature / top-k / top-p;
- draft tokens: the k tokens the proposer guessed, x_1..x_k, x_i drawn from q_i;
- accepted tokens: the leading draft tokens kept; x_i is kept with probability min(1, p_i(x_i) / q_i(x_i));
- recovered token: at the first rejection, a token drawn from norm(max(0, p_i - q_i));
- bonus token: when all k are accepted, a token drawn from p_{k+1}.
Each cycle therefore emits accepted + 1 tokens, distributed exactly as k + 1 plain sampling steps.

A proposer without probabilities (n-gram lookup) proposes deterministically: q is one-hot at its token, so it is
accepted with probability p(x) and the residual is p with x removed. Greedy decoding is the special case where p
is one-hot at the target's argmax.

`verify_chain` is pure: all randomness comes in as uniforms. `verify_chain_reference` is the slow, literal twin
the tests compare it with.
"""
from __future__ import annotations

import torch

from .sampling import sample


def verify_chain(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor, u_accept: torch.Tensor,
                 u_final: torch.Tensor, num_draft: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Accept a prefix of each row's draft tokens and draw the recovered or bonus token.

    p:            [batch, k+1, vocab] target probabilities at draft positions 1..k and the bonus position k+1
    q:            [batch, k, vocab] draft probabilities, or None when the proposer is deterministic (one-hot q)
    draft_tokens: [batch, k] int64
    u_accept:     [batch, k] uniforms in [0, 1) for the accept tests
    u_final:      [batch] uniforms for the recovered / bonus draw
    num_draft:    [batch] real drafts per row (ragged batches pad up to k); None means k for every row
    Returns (num_accepted [batch] int64, next_token [batch] int64): row b emits
    draft_tokens[b, :num_accepted[b]] followed by next_token[b].
    """
    batch, k = draft_tokens.shape
    rows = torch.arange(batch, device=p.device)
    if num_draft is None:
        num_draft = torch.full((batch,), k, dtype=torch.long, device=p.device)
    if k == 0:
        return torch.zeros(batch, dtype=torch.long, device=p.device), sample(p[:, 0], u_final)
    p_draft = p[:, :k].gather(-1, draft_tokens[..., None])[..., 0]            # [batch, k]
    q_draft = torch.ones_like(p_draft) if q is None else q.gather(-1, draft_tokens[..., None])[..., 0]
    accept = u_accept < p_draft / q_draft                                     # prob. min(1, p/q)
    accept &= torch.arange(k, device=p.device) < num_draft[:, None]
    num_accepted = accept.long().cumprod(-1).sum(-1)                          # [batch] leading run of accepts

    p_next = p[rows, num_accepted]                                            # [batch, vocab]
    at = num_accepted.clamp(max=k - 1)                                        # rejected position (if any)
    if q is None:
        q_next = torch.zeros_like(p_next).scatter_(-1, draft_tokens[rows, at][:, None], 1.0)
    else:
        q_next = q[rows, at]
    residual = (p_next - q_next).clamp_min(0)                                 # max(0, p - q), unnormalised
    rejected = (num_accepted < num_draft)[:, None]
    usable = residual.sum(-1, keepdim=True) > 0  # p == q to rounding: rejection had probability ~0, fall back to p
    weights = torch.where(rejected & usable, residual, p_next)
    return num_accepted, sample(weights, u_final)


def verify_chain_reference(p, q, draft_tokens, u_accept, u_final, num_draft=None):
    """Slow, literal version of `verify_chain`: one row, one position at a time."""
    batch, k = draft_tokens.shape
    num_accepted, next_tokens = [], []
    for b in range(batch):
        kb = k if num_draft is None else int(num_draft[b])
        n = 0
        while n < kb:
            x = int(draft_tokens[b, n])
            qx = 1.0 if q is None else float(q[b, n, x])
            if float(u_accept[b, n]) < float(p[b, n, x]) / qx:  # accept x with probability min(1, p(x)/q(x))
                n += 1
            else:
                break
        if n < kb:  # recovered token from norm(max(0, p - q)) at the rejected position n
            if q is None:
                qn = torch.zeros_like(p[b, n])
                qn[int(draft_tokens[b, n])] = 1.0
            else:
                qn = q[b, n]
            weights = torch.clamp(p[b, n] - qn, min=0)
            if float(weights.sum()) <= 0:
                weights = p[b, n]
        else:       # bonus token from p after the last draft position
            weights = p[b, n]
        num_accepted.append(n)
        next_tokens.append(int(sample(weights, u_final[b])))
    return torch.tensor(num_accepted), torch.tensor(next_tokens)


def verify_tree(p: torch.Tensor, q: torch.Tensor | None, node_tokens: list[int], tree, u_accept: torch.Tensor,
                u_final: torch.Tensor) -> tuple[list[int], int]:
    """Recursive rejection sampling over a token tree (SpecInfer's multi-candidate rule); one sequence.

    p:           [1 + n, vocab] target probabilities at the root (index 0) and at every node
    q:           [1 + n, vocab] the draft distribution each node's children were drawn from, i.i.d.; or None
                 when children are deterministic picks (top-k ranks, n-grams): then each is one-hot
    node_tokens: [n] the token at nodes 1..n; tree: a `TokenTree`
    u_accept:    [1 + n] uniforms, u_accept[c] tests child c; u_final: [] uniform for the last draw
    Starting at the root, children are tried in order: child x is accepted with probability
    min(1, r(x) / q(x)), where r starts as p at the parent; each rejection replaces r by
    norm(max(0, r - q)). The first accepted child becomes the parent; if none is, a recovered token is drawn
    from r, and a leaf ends with a bonus token drawn from p at the leaf. Returns (accepted node indices in
    order, next token). With deterministic children this samples exactly from p; with i.i.d. children too.
    """
    node, path = 0, []
    while True:
        children = tree.children(node)
        if not children:
            return path, int(sample(p[node], u_final))                        # bonus token
        r = p[node]
        for child in children:
            x = node_tokens[child - 1]
            qn = q[node] if q is not None else \
                torch.zeros_like(r).index_fill_(0, torch.tensor([x], device=r.device), 1.0)
            if float(u_accept[child]) < float(r[x]) / float(qn[x]):
                path.append(child)
                node = child
                break
            residual = (r - qn).clamp_min(0)
            if float(residual.sum()) <= 0:    # r == q to rounding: a rejection had probability ~0
                residual = r
            r = residual / residual.sum()
        else:
            return path, int(sample(r, u_final))                              # recovered token


def verify_tree_drawn(p: torch.Tensor, node_tokens: list[int], tree, u: torch.Tensor) -> tuple[list[int], int]:
    """`verify_tree` for deterministic children (q one-hot at each child: top-k ranks, n-grams), one draw a node.

    p: [1 + n, vocab] as for `verify_tree`; u: [1 + n] uniforms, u[i] for node i (0: the root).
    With one-hot q, the children x_1, x_2, ... of a node are tried in order: x_j is accepted with probability
    p(x_j) / (1 - p(x_1) - ... - p(x_{j-1})) once the earlier ones are rejected (the residual r is p with them
    removed, renormalised), so with probability p(x_j) in all; if none is, the recovered token comes from p
    restricted to the other tokens. That is the law of one token y ~ p at the node: move to the child holding y,
    or stop and emit y (a recovered token, or the bonus at a leaf). So draw y at every node at once and follow the
    draws exactly as `greedy_tree` follows the argmax. Nothing reads p node by node: on a GPU the draws come back
    in one read. Returns (accepted node indices in order, next token), distributed as `verify_tree`'s."""
    return greedy_tree(tree_draws(p, u).tolist(), node_tokens, tree)


def tree_draws(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token `verify_tree_drawn` draws at each node: p [1 + n, vocab], u [1 + n] -> [1 + n] ids, where p is."""
    return sample(p, u)


def greedy_chain(top: list[int], draft_tokens: list[int]) -> tuple[int, int]:
    """`verify_chain` at temperature 0, one sequence: p is one-hot at the target's argmax top[i] (position i, before
    draft token i; top has k + 1 entries), so whatever q, draft token i is accepted exactly when it equals top[i]
    (p(x) / q(x) >= 1 > u), and the residual max(0, p - q) is one-hot at top[i] too: the recovered or bonus token is
    top at the first mismatch. The same result without arithmetic over the vocabulary; tests compare the two.
    Returns (num_accepted, next_token)."""
    n = 0
    while n < len(draft_tokens) and draft_tokens[n] == top[n]:
        n += 1
    return n, top[n]


def greedy_tree(top, node_tokens: list[int], tree) -> tuple[list[int], int]:
    """`verify_tree` at temperature 0: top[i] is the target's argmax at the root (0) and node i (a list, or
    anything indexable that computes it on demand). From the root, the first child holding the node's argmax is
    accepted (rejected children leave r one-hot at it); where none does, or at a leaf, that argmax is the recovered
    or bonus token. Returns (accepted node indices in order, next token), as `verify_tree` does on one-hot p.
    At T > 0 `verify_tree_drawn` follows a draw from p at each node the same way."""
    node, path = 0, []
    while True:
        want = top[node]
        child = next((c for c in tree.children(node) if node_tokens[c - 1] == want), None)
        if child is None:
            return path, want
        path.append(child)
        node = child


def verify_tree_typical(p: torch.Tensor, node_tokens: list[int], tree, u_final: torch.Tensor,
                        epsilon: float = 0.09, delta: float = 0.3) -> tuple[list[int], int]:
    """Medusa's typical acceptance over a token tree. LOSSY: the output does NOT follow p exactly at T > 0.

    p: [1 + n, vocab] target probabilities at the root and every node. A node is acceptable when its parent is
    and p(token | parent) > min(epsilon, delta * exp(-H(p at parent))): likely enough, with the bar lowered
    where the target itself is unsure. The deepest acceptable node (the first, breadth-first) ends the accepted
    path, and the next token is drawn from p there. At temperature 0 only argmax tokens pass: greedy decoding.
    """
    entropy = -(p * p.clamp_min(1e-30).log()).sum(-1)                          # [1 + n]
    bar = torch.clamp(delta * torch.exp(-entropy), max=epsilon)                 # [1 + n]
    ok = [True] + [False] * tree.size
    best = 0
    for child in range(1, tree.size + 1):                                       # breadth-first: parents first
        parent = tree.parents[child]
        ok[child] = ok[parent] and float(p[parent, node_tokens[child - 1]]) > float(bar[parent])
        if ok[child] and tree.depths[child] > tree.depths[best]:
            best = child
    path, node = [], best
    while node > 0:
        path.append(node)
        node = tree.parents[node]
    return path[::-1], int(sample(p[best], u_final))
