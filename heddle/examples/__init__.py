"""Runnable examples of the training loop around Heddle (``python -m heddle.examples.grpo``).

Modules: ``grpo`` (a GRPO run that learns, on a CPU, end to end through Heddle), ``grpo_train`` (its
trainer's half: group-relative advantages and one policy-gradient step under ``Completed``'s loss
mask).
"""
