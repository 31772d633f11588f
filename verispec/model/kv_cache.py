"""An explicit, preallocated key/value cache with a length, `truncate` (chains) and `compact` (trees).

Slots `[0, length)` hold keys and values of tokens that are part of the sequence. A forward pass over n new tokens
writes slots `[length, length + n)` and advances `length`. Rolling back a rejected draft is `truncate`: the stale
slots beyond `length` are never read again before they are overwritten.

A bf16 cache on the CPU also keeps its full chunks of slots laid out as its attention reads them (`panels`: bf16a's
pair panels, or AMX-BF16 tiles); whatever may change a slot clears the chunks from it on (`stale`: truncate,
compact, write, and the start of every pass).
"""
from __future__ import annotations

import torch

from .host import upload


class KVCache:
    def __init__(self, num_layers: int, batch: int, num_kv_heads: int, capacity: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str = "cpu"):
        shape = (num_layers, batch, num_kv_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # [layers, batch, kv_heads, capacity, head_dim]
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # [layers, batch, kv_heads, capacity, head_dim]
        self.layers = [(self.k[i], self.v[i]) for i in range(num_layers)]  # per layer [batch, kv_heads, capacity, d]
        self._views: dict = {}                                    # (layer, batch entry) -> (k, v): `sequence`
        self.capacity = capacity
        self.length = 0
        self._panels: tuple | None = None                   # `panels`: (chunk, kind, store, built), made on first use

    def write(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store n new keys/values at slots [length, length + n) of `layer`; return views of all valid slots.

        k_new, v_new: [batch, kv_heads, n, head_dim]. Returns two [batch, kv_heads, length + n, head_dim] views.
        `length` itself moves only in `advance`, once every layer has written.
        """
        n = k_new.shape[2]
        end = self.length + n
        if end > self.capacity:
            raise ValueError(f"KV cache overflow: {end} slots needed, capacity {self.capacity}")
        k, v = self.layers[layer]
        self.stale(self.length)
        k.narrow(2, self.length, n).copy_(k_new)
        v.narrow(2, self.length, n).copy_(v_new)
        return k.narrow(2, 0, end), v.narrow(2, 0, end)

    def sequence(self, layer: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch entry b's keys and values of `layer`: two [kv_heads, capacity, head_dim] views (made once)."""
        kv = self._views.get((layer, b))
        if kv is None:
            kv = self._views[(layer, b)] = (self.layers[layer][0][b], self.layers[layer][1][b])
        return kv

    def panels(self, chunk: int, kind: str = "pairs") -> tuple[torch.Tensor, torch.Tensor]:
        """Attention's store of laid-out chunks (kernels/attention_pairs.h, `Panels`), made on first use and made
        afresh for another chunk size or layout (`kind`: "pairs", bf16a's pair panels; "tiles", AMX-BF16 tiles,
        `ops.store_kind`): [layers, batch, kv_heads, capacity // chunk, chunk * head_dim] int32 (each full chunk of
        `chunk` slots as its keys' then its values' layout) and [layers, batch, capacity // chunk] uint8, 1 where a
        chunk was laid out from its slots as they are now. The kernels lay chunks out; `stale` clears the flags
        from a slot on."""
        if self._panels is None or self._panels[:2] != (chunk, kind):
            layers, batch, heads, cap, d = self.k.shape
            self._panels = (chunk, kind, torch.empty(layers, batch, heads, cap // chunk, chunk * d, dtype=torch.int32,
                                                     device=self.k.device),
                            torch.zeros(layers, batch, cap // chunk, dtype=torch.uint8, device=self.k.device))
        return self._panels[2], self._panels[3]

    def stale(self, slot: int) -> None:
        """Slots from `slot` on may change: no laid-out chunk that holds one of them is read again (`panels`)."""
        if self._panels is not None:
            self._panels[3][:, :, slot // self._panels[0]:] = 0

    def advance(self, n: int) -> None:
        self.length += n

    def truncate(self, length: int) -> None:
        """Roll back to the first `length` slots (a rejected chain suffix is simply forgotten)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of length {self.length} to {length}")
        self.length = length
        self.stale(length)

    def prefix(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of batch entry 0's first n keys and values: two [layers, kv_heads, n, head_dim] (a kept prompt)."""
        return self.k[:, 0, :, :n].clone(), self.v[:, 0, :, :n].clone()

    def load(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Batch entry 0 holds `prefix`'s k, v [layers, kv_heads, n, head_dim] in its first n slots; length n."""
        n = k.shape[2]
        if n > self.capacity:
            raise ValueError(f"KV cache overflow: {n} slots needed, capacity {self.capacity}")
        self.stale(0)
        self.k[:, 0, :, :n].copy_(k)
        self.v[:, 0, :, :n].copy_(v)
        self.length = n

    def compact(self, start: int, keep: torch.Tensor) -> None:
        """Keep, after the first `start` slots, only the slots `start + keep[i]`, moved into place; drop the rest.

        Used after tree verification: `keep` ([n] ascending node indices) is the accepted root-to-node path.
        """
        n = int(keep.numel())
        self.stale(start)
        if n and not torch.equal(keep.cpu(), torch.arange(n)):    # compared on the host: no device sync
            src = upload(start + keep, self.k.device)
            self.k[:, :, :, start:start + n] = self.k.index_select(3, src)
            self.v[:, :, :, start:start + n] = self.v.index_select(3, src)
        self.length = start + n
