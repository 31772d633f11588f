"""Statistics of one generation: passes, acceptance by position, accepted-length histogram, time split.

Definitions (the README uses the same):
- target_passes: target forward passes, the prefill included;
- drafted_tokens: draft tokens proposed; accepted_tokens: those kept;
- acceptance_rate (alpha): accepted / checked, where a draft token is checked when every token before it in its
  chain was accepted. Under independent acceptances this estimates alpha = 1 - TV(p, q) directly. For a tree,
  a depth is checked when the path reached it, and accepted when one of the candidates there was;
- acceptance_by_position[i]: the same ratio for draft position i + 1;
- draft_efficiency: accepted / drafted (what fraction of the draft work was kept);
- mean_accepted_tokens (MAT): tokens emitted per decoding pass (accepted drafts + the recovered/bonus token);
  plain decoding has MAT 1. The prefill pass, which emits the first token, is left out;
- accepted_length_histogram[n]: decoding passes with a non-empty draft that accepted exactly n draft tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    target_passes: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    checked_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    accepted_length_histogram: list[int] = field(default_factory=list)
    time_prefill_s: float = 0.0
    time_draft_s: float = 0.0
    time_verify_s: float = 0.0
    time_total_s: float = 0.0
    lossy: bool = False         # typical acceptance: output not distributed exactly as the target's
    _decode_emitted: int = 0

    def record_cycle(self, drafted: int, accepted: int, emitted: int, depth: int | None = None,
                     cut: bool = False) -> None:
        """One decoding pass: `drafted` draft tokens (a chain of that length, or a tree of that many nodes and
        the given depth), `accepted` of them kept, `emitted` tokens output. cut: the output ended (a stop token)
        inside the accepted drafts, after `accepted` of them: the positions past it count as neither checked nor
        accepted."""
        self.target_passes += 1
        self.drafted_tokens += drafted
        self.accepted_tokens += accepted
        self._decode_emitted += emitted
        drafted = drafted if depth is None else depth   # positions that could be accepted
        if drafted == 0:
            return
        grow = drafted - len(self.checked_by_position)
        if grow > 0:
            self.checked_by_position += [0] * grow
            self.accepted_by_position += [0] * grow
        for i in range(min(accepted + (not cut), drafted)):  # positions 0..accepted were checked
            self.checked_by_position[i] += 1
        for i in range(accepted):
            self.accepted_by_position[i] += 1
        if accepted >= len(self.accepted_length_histogram):
            self.accepted_length_histogram += [0] * (accepted + 1 - len(self.accepted_length_histogram))
        self.accepted_length_histogram[accepted] += 1

    @property
    def checked_tokens(self) -> int:
        return sum(self.checked_by_position)

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.checked_tokens if self.checked_tokens else None

    @property
    def mean_accepted_tokens(self) -> float | None:
        decode_passes = self.target_passes - 1
        return self._decode_emitted / decode_passes if decode_passes > 0 else None

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.time_total_s if self.time_total_s > 0 else 0.0

    def to_dict(self) -> dict:
        by_pos = [a / c if c else None for a, c in zip(self.accepted_by_position, self.checked_by_position)]
        return {
            "prompt_tokens": self.prompt_tokens, "new_tokens": self.new_tokens,
            "target_passes": self.target_passes, "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens, "checked_tokens": self.checked_tokens,
            "acceptance_rate": self.acceptance_rate,
            "acceptance_by_position": by_pos,
            "draft_efficiency": self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None,
            "mean_accepted_tokens": self.mean_accepted_tokens,
            "accepted_length_histogram": self.accepted_length_histogram,
            "tokens_per_s": self.tokens_per_s,
            "time_prefill_s": self.time_prefill_s, "time_draft_s": self.time_draft_s,
            "time_verify_s": self.time_verify_s,
            "time_other_s": max(0.0, self.time_total_s - self.time_prefill_s - self.time_draft_s
                                - self.time_verify_s),
            "time_total_s": self.time_total_s,
            "lossy": self.lossy,
        }

