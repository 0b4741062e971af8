"""The tiny context model's fixtures (``tests/tiny_context_model.py``)."""

from tiny_context_model import tiny_encoder, tiny_model

__all__ = ["tiny_encoder", "tiny_model"]
