"""Drafts and heads trained by verispec, written in the formats other engines load (`verispec export`)."""
