"""The server's prefix cache: the keys and values of recent prompts, kept after their prefill, and then of the
prompt and its answer once the request finishes, so that a later prompt that begins with the same tokens (a chat's
next turn, one document asked many questions, one long system prompt) prefills only what follows them.

An entry holds those tokens' target keys and values and the target's final hidden states at their positions; a
proposer that reads them (EAGLE, Medusa) is shown those as if the positions had just been prefilled. An answer's
come from the passes that decoded it. A joining prompt starts from the entry that shares its longest prefix, if
that is at least `min_tokens` long, and never from its last token, whose pass draws the first token
(serve.prefill, `Prefill.reuse`). Entries live within `megabytes`, the least recently used going first.

Exactness: on the row-invariant kernels (`verispec doctor`) a position's keys, values and hidden state depend on
its token and the tokens before it alone, so a kept prefix holds the very bits the joining prompt's own prefill
would compute, and the output equals offline `verispec generate`'s bit for bit (tests/test_serve_prefix.py).
Elsewhere, as with chunked prefill, low bits could differ.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_TOKENS = 16


@dataclass(eq=False)           # entries compare and hash by identity
class Entry:
    tokens: torch.Tensor       # [n] int64: a prompt, or a prompt and its answer
    k: torch.Tensor            # [layers, kv_heads, n, head_dim]
    v: torch.Tensor            # [layers, kv_heads, n, head_dim]
    features: torch.Tensor     # [n, D] the target's final hidden states

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.tokens, self.k, self.v, self.features))

    def prefix(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The first n positions' k, v [layers, kv_heads, n, head_dim] and features [n, D] (views)."""
        return self.k[:, :, :n], self.v[:, :, :n], self.features[:n]


def shared(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many leading tokens two [n] id tensors share."""
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return n if len(differ) == 0 else int(differ[0])


class PrefixCache:
    def __init__(self, megabytes: float, min_tokens: int = MIN_TOKENS):
        self.budget, self.min_tokens = int(megabytes * 2 ** 20), min_tokens
        self.entries: dict[Entry, None] = {}       # least recently used first (ordered; moved and dropped in O(1))
        # entries by their first min_tokens tokens: only an entry with a prompt's own could share min_tokens with it,
        # so a lookup compares a few entries, not every one (thousands of short prompts fit the default budget)
        self.heads: dict[tuple[int, ...], list[Entry]] = {}
        self.nbytes = 0

    def _head(self, tokens: list[int]) -> tuple[int, ...]:
        return tuple(tokens[:self.min_tokens])

    def keeps(self, prompt: list[int]) -> bool:
        """Whether a request with this prompt is kept (its prompt, then its answer): longer than `min_tokens`."""
        return len(prompt) > self.min_tokens

    def match(self, prompt: list[int]) -> tuple[Entry, int] | None:
        """The entry sharing the longest prefix with `prompt` and that prefix's length, at most len(prompt) - 1;
        None if no entry shares `min_tokens` tokens. The entry becomes the most recently used."""
        candidates = self.heads.get(self._head(prompt)) if len(prompt) > self.min_tokens else None
        if not candidates:
            return None
        ids = torch.tensor(prompt[:-1])
        best, n = max(((e, shared(e.tokens, ids)) for e in candidates), key=lambda en: en[1])
        if n < self.min_tokens:
            return None
        self._touch(best)
        return best, n

    def keep(self, prompt: list[int], cache, features: torch.Tensor) -> None:
        """Keep a prompt just prefilled, or a finished request's prompt and answer (`prompt`, all the tokens kept):
        `cache` (a KVCache) holds their keys and values in its first len(prompt) slots, `features` [len(prompt), D]
        their hidden states. Entries it extends go (it serves every prompt they
        serve); so does an entry it only repeats a prefix of, if this one is longer; if one extends it, that one
        stays and is touched."""
        ids = torch.tensor(prompt)
        if len(ids) <= self.min_tokens or features.shape[0] != len(ids):
            return
        head = self._head(prompt)
        common = [(e, shared(e.tokens, ids)) for e in self.heads.get(head, [])]
        holding = next((e for e, n in common if n == len(ids)), None)    # it holds this whole prompt
        if holding is not None:
            self._touch(holding)
            return
        k, v = cache.prefix(len(ids))               # copied before any entry goes (no memory: nothing changes)
        entry = Entry(ids, k, v, features)
        if entry.nbytes > self.budget:                                   # too large: the entries stay as they were
            return
        for e, n in common:
            if n == len(e.tokens):                                       # a prompt this one extends
                self._drop(e)
        while self.nbytes + entry.nbytes > self.budget:
            self._drop(next(iter(self.entries)))
        self.entries[entry] = None
        self.heads.setdefault(head, []).append(entry)
        self.nbytes += entry.nbytes

    def _touch(self, entry: Entry) -> None:
        """`entry` becomes the most recently used."""
        del self.entries[entry]
        self.entries[entry] = None

    def _drop(self, entry: Entry) -> None:
        del self.entries[entry]
        head = self._head(entry.tokens.tolist())
        self.heads[head].remove(entry)
        if not self.heads[head]:
            del self.heads[head]
        self.nbytes -= entry.nbytes
