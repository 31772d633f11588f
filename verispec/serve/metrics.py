"""Prometheus metrics of the server: requests, tokens, speculation (acceptance, tokens per pass, drafts by
position), batch size and latency. Each server owns a registry, so several can run in one process (tests)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..stats import GenerationStats

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TOKEN_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1)


class Metrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.requests = Counter("verispec_requests", "Requests finished, by method and outcome",
                                ["method", "outcome"], registry=r)
        self.prompt_tokens = Counter("verispec_prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter("verispec_generation_tokens", "Tokens generated", registry=r)
        self.target_passes = Counter("verispec_target_passes", "Per-sequence target passes (decoding cycles)",
                                     registry=r)
        self.drafted = Counter("verispec_draft_tokens", "Draft tokens proposed", registry=r)
        self.checked = Counter("verispec_checked_draft_tokens",
                               "Draft tokens checked (every earlier draft token of the cycle accepted)", registry=r)
        self.accepted = Counter("verispec_accepted_tokens", "Draft tokens accepted", registry=r)
        self.checked_at = Counter("verispec_checked_draft_tokens_by_position", "Draft tokens checked, by position",
                                  ["position"], registry=r)
        self.accepted_at = Counter("verispec_accepted_tokens_by_position", "Draft tokens accepted, by position",
                                   ["position"], registry=r)
        self.acceptance_rate = Gauge("verispec_acceptance_rate", "Accepted / checked draft tokens, since start",
                                     registry=r)
        self.mean_accepted = Gauge("verispec_mean_accepted_tokens_per_pass",
                                   "Tokens emitted per decoding pass, since start", registry=r)
        self.running = Gauge("verispec_requests_running", "Sequences in the decoding batch", registry=r)
        self.waiting = Gauge("verispec_requests_waiting", "Requests waiting for a batch slot", registry=r)
        self.batch_size = Histogram("verispec_batch_size", "Sequences per packed target pass",
                                    buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.ttft = Histogram("verispec_time_to_first_token_seconds", "Arrival to first token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("verispec_time_per_output_token_seconds", "Mean time per output token after the "
                              "first, per request", buckets=TOKEN_BUCKETS, registry=r)
        self.latency = Histogram("verispec_request_latency_seconds", "Arrival to last token",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.prefix_hits = Counter("verispec_prefix_cache_hits", "Prompts prefilled from a kept prefix of an "
                                   "earlier prompt (--prefix-cache-mb)", registry=r)
        self.prefix_tokens = Counter("verispec_prefix_cache_tokens", "Prompt tokens taken from kept prefixes, not "
                                     "prefilled", registry=r)
        self.prefix_bytes = Gauge("verispec_prefix_cache_bytes", "Bytes of kept prefixes", registry=r)
        self._totals = {"checked": 0, "accepted": 0, "passes": 0, "emitted": 0.0}   # for the two ratio gauges

    def finished(self, method: str, outcome: str, stats: GenerationStats) -> None:
        """Count a finished sequence's tokens and speculation statistics."""
        self.requests.labels(method, outcome).inc()
        self.prompt_tokens.inc(stats.prompt_tokens)
        self.generation_tokens.inc(stats.new_tokens)
        self.target_passes.inc(max(0, stats.target_passes - 1))        # decoding passes, the prefill not counted
        self.drafted.inc(stats.drafted_tokens)
        self.checked.inc(stats.checked_tokens)
        self.accepted.inc(stats.accepted_tokens)
        for i, (c, a) in enumerate(zip(stats.checked_by_position, stats.accepted_by_position)):
            self.checked_at.labels(str(i + 1)).inc(c)
            self.accepted_at.labels(str(i + 1)).inc(a)
        t = self._totals
        t["checked"] += stats.checked_tokens
        t["accepted"] += stats.accepted_tokens
        t["passes"] += max(0, stats.target_passes - 1)
        t["emitted"] += stats.mean_accepted_tokens * (stats.target_passes - 1) if stats.target_passes > 1 else 0
        if t["checked"]:
            self.acceptance_rate.set(t["accepted"] / t["checked"])
        if t["passes"]:
            self.mean_accepted.set(t["emitted"] / t["passes"])

    def rejected(self, reason: str) -> None:
        self.requests.labels("none", reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
