"""Continuous batching: many sequences decode together, their target passes packed into one.

Each step
  1. every running sequence plans its cycle with its own proposer, k and random stream: [newest, drafts...];
  2. one packed target pass scores them all (`Llama.forward_packed`): matrix products over every row at once,
     attention per sequence over its own KV cache, so counts and lengths may differ from row to row;
  3. every sequence accepts from its own rows (`Sequence.finish`) with its own sampling settings and seed.
No row mixes with another sequence's, and on CPU bf16 the matrix products are row-invariant, so a sequence's
output is what it would be alone, bit for bit. A new sequence is prefilled alone and joins at the next step.

A failure is the failing sequence's alone: an exception while one sequence plans or accepts drops that sequence
(it lands in `failed`, with its error) and the others go on; if the packed pass itself fails, each sequence
is run alone, so only those whose own pass fails are dropped. Either way the others' rows are what they would
have been, so their output does not change.

Sequences sharing a draft model draft together: each draft step is one packed pass of the draft for all of
them (`proposers.draft_model.propose_together`), with each sequence's own draws, so drafting too is unchanged.

Batch size changes the cost curve: a bigger batch is less memory-bound, and extra verified tokens cost more.
Sequences with k = "auto" choose k with the cost curve measured for the current batch size
(`CostProfile.batch_costs`), so speculation switches itself off once it no longer pays. A *pinned* sequence (a
seeded sampled request) keeps the single-sequence curve: its k schedule, hence its random stream and its output,
must not depend on which batch it runs in. Greedy output never depends on k, so greedy requests need no pin.

The cost model misses what a batch pays besides its passes (per-sequence sampling and verification, partly
filled steps), so a measured gate backs it: per batch size, running means of tokens emitted per second in steps
that drafted and in steps that did not. Once both are known, a batch size whose drafting steps emit tokens more
slowly than its plain ones decodes plainly (pinned sequences excepted); one step in `probe_every` tries the
other side, so the comparison follows the traffic.
"""
from __future__ import annotations

import time

import torch

from ..autok import AutoK, CostProfile
from ..engine import Sequence
from ..model.llama import Llama


class SpeculationGate:
    """Per batch size: tokens per second of drafting and of plain steps, measured; which side to take next."""

    def __init__(self, probe_every: int = 16, weight: float = 0.1, min_steps: int = 4):
        self.probe_every, self.weight, self.min_steps = probe_every, weight, min_steps
        self.rate: dict[tuple[int, bool], float] = {}      # (batch size, drafted) -> tokens/s, running mean
        self.seen: dict[tuple[int, bool], int] = {}
        self.steps = 0

    @staticmethod
    def bucket(size: int) -> int:
        """Batch sizes share measurements within powers of two: 3-4, 5-8, 9-16, ..."""
        return 1 << (size - 1).bit_length()

    def speculate(self, size: int) -> bool:
        self.steps += 1
        spec, plain = (self.bucket(size), True), (self.bucket(size), False)
        if min(self.seen.get(spec, 0), self.seen.get(plain, 0)) < self.min_steps:
            # learn both sides first: drafting steps come by themselves; plain ones every other step
            return self.seen.get(plain, 0) >= self.min_steps or self.steps % 2 == 0
        better = self.rate[spec] >= self.rate[plain]
        return better != (self.steps % self.probe_every == 0)

    def record(self, size: int, drafted: bool, tokens: int, seconds: float) -> None:
        key = (self.bucket(size), drafted)
        rate = tokens / max(seconds, 1e-9)
        n = self.seen.get(key, 0)
        self.rate[key] = rate if n == 0 else self.rate[key] + max(self.weight, 1 / (n + 1)) * (rate - self.rate[key])
        self.seen[key] = n + 1


class Batch:
    def __init__(self, target: Llama, profile: CostProfile | None = None):
        self.target, self.profile = target, profile or CostProfile()
        self.gate = SpeculationGate()
        self.running: list[Sequence] = []
        self.pinned: set[int] = set()       # id() of running sequences that keep the single-sequence cost curve
        self.failed: list[tuple[Sequence, Exception]] = []   # dropped after an error of their own; see take_failed
        self.fault = None                   # test-only hook: fault(seq) runs before each plan and may raise

    def __len__(self) -> int:
        return len(self.running)

    @torch.inference_mode()
    def add(self, seq: Sequence, pinned: bool = False) -> None:
        """Prefill `seq` alone, draw its first token, and let it join the next step (unless already finished)."""
        seq.prefill()
        self.join(seq, pinned)

    def join(self, seq: Sequence, pinned: bool = False) -> None:
        """Let a prefilled sequence join the next step (unless already finished)."""
        if not seq.done:
            self.running.append(seq)
            if pinned:
                self.pinned.add(id(seq))

    @torch.inference_mode()
    def step(self) -> list[Sequence]:
        """One cycle of every running sequence in one packed target pass; returns the sequences that finished
        (those cancelled since the last step included)."""
        finished = self._drop_finished()
        if not self.running:
            return finished
        try:
            return finished + self._cycle()
        except Exception:
            self.running = finished + self.running   # (cancelled ones) for `abandon`, which hands them back too
            raise

    def _cycle(self) -> list[Sequence]:
        """`step`'s work once cancelled sequences have left: returns the sequences that finished in it."""
        t_step = time.perf_counter()
        size = len(self.running)
        self._fit_k()
        ks = [seq.draft_length() for seq in self.running]
        if len(self.running) > 1 and any(ks) and not self.gate.speculate(size):   # measured: plain is faster
            ks = [k if id(seq) in self.pinned else 0 for seq, k in zip(self.running, ks)]
        try:
            proposals = self._draft_together(ks)
        except Exception:                                       # each sequence drafts alone in plan instead
            proposals = [None] * len(ks)
        steps = []
        for seq, k, proposal in zip(list(self.running), ks, proposals):
            try:
                if self.fault is not None:
                    self.fault(seq)
                steps.append(seq.plan(k, proposal))
            except Exception as e:
                self._fail(seq, e)
        t0 = time.perf_counter()
        emitted = 0
        for seq, st, h, lg in self._verify_rows(steps) if steps else []:
            try:
                emitted += len(seq.finish(st, h, lg))           # h: [1, 1+n_i, D], lg: [1, 1+n_i, V]
            except Exception as e:
                self._fail(seq, e)
        elapsed = time.perf_counter() - t0
        if size > 1:
            self.gate.record(size, any(st.proposal.size for st in steps), emitted, time.perf_counter() - t_step)
        for seq in self.running:
            seq.stats.time_verify_s += elapsed
        return self._drop_finished()

    def _verify_rows(self, steps: list) -> list[tuple]:
        """(sequence, its pass, hidden [1, 1+n, D], logits [1, 1+n, V]) for every running sequence: one packed
        pass; if that fails, each sequence alone (dropping those whose own pass fails)."""
        lengths = [seq.cache.length for seq in self.running]
        try:
            hidden = self.target.forward_packed([st.inputs(seq.cache) for seq, st in zip(self.running, steps)])
            # one output-head product over every row (in row-invariant blocks), not one per sequence
            logits = self.target.logits(torch.cat(hidden, 1)).split([h.shape[1] for h in hidden], 1)
            return list(zip(self.running, steps, hidden, logits))
        except Exception:
            rows = []
            for seq, st, length in zip(list(self.running), steps, lengths):
                try:
                    seq.cache.truncate(length)              # undo whatever the failed pass advanced
                    h = self.target(*st.inputs(seq.cache))
                    rows.append((seq, st, h, self.target.logits(h)))
                except Exception as e:
                    self._fail(seq, e)
            return rows

    def _fail(self, seq: Sequence, error: Exception) -> None:
        seq.cancel()
        self.running.remove(seq)
        self.pinned.discard(id(seq))
        self.failed.append((seq, error))

    def take_failed(self) -> list[tuple[Sequence, Exception]]:
        failed, self.failed = self.failed, []
        return failed

    def run(self, sequences: list[Sequence]) -> None:
        """Decode `sequences` together to the end (all joining at once)."""
        for seq in sequences:
            self.add(seq)
        while self.running:
            self.step()

    def _draft_together(self, ks: list[int]) -> list:
        """Proposals of the sequences whose proposers can draft together (a shared draft model: one packed draft
        pass per draft step for all of them); None where a sequence drafts on its own in `plan`."""
        out = [None] * len(ks)
        groups: dict = {}
        for i, (seq, k) in enumerate(zip(self.running, ks)):
            together = None if seq.proposer is None else seq.proposer.draft_together
            if k and together is not None:
                groups.setdefault((together, id(seq.proposer.model)), []).append(i)
        for (together, _), members in groups.items():
            if len(members) < 2:
                continue
            t0 = time.perf_counter()
            jobs = [(self.running[i].proposer, self.running[i].context(), ks[i], self.running[i].cfg.sampling,
                     self.running[i].gen) for i in members]
            for i, proposal in zip(members, together(jobs)):
                out[i] = proposal
            elapsed = time.perf_counter() - t0
            for i in members:
                self.running[i].stats.time_draft_s += elapsed
        return out

    def _fit_k(self) -> None:
        """Give every unpinned automatic-k sequence the cost curve of the current batch size."""
        size = len(self.running)
        for seq in self.running:
            if isinstance(seq.auto, AutoK) and id(seq) not in self.pinned:
                together = seq.proposer.draft_together is not None
                seq.auto.c, seq.auto.curve = self.profile.batch_costs(seq.proposer.name, size, together)

    def abandon(self) -> list[Sequence]:
        """Drop every running sequence (after a failed step); return them."""
        dropped, self.running, self.pinned = self.running, [], set()
        return dropped

    def _drop_finished(self) -> list[Sequence]:
        done = [seq for seq in self.running if seq.done]
        if done:
            self.running = [seq for seq in self.running if not seq.done]
            self.pinned -= {id(seq) for seq in done}
        return done
