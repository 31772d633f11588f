"""Serving: continuous batching of speculative decoding (`batch`) behind an OpenAI-compatible HTTP API (`app`)."""
