"""Runnable examples of the training loop around Heddle (``python -m heddle.examples.grpo``)."""
