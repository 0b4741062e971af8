"""Heddle: a trajectory-centric rollout orchestrator for agentic RL."""

__version__ = "0.1.0"
