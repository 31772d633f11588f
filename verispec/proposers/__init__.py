"""Proposers: one file per strategy, all behind `base.Proposer`."""
from .base import Proposal, Proposer

__all__ = ["Proposal", "Proposer"]
