"""What the SGLang client and engine tests share about where they run: against the protocol
double (``sglang_double``), or a real server when ``HEDDLE_SGLANG_URL`` names one."""

from __future__ import annotations

import pytest
from sglang_double import real_server_url

needs_double = pytest.mark.skipif(
    real_server_url() is not None, reason="uses the double's hooks; not a real-server check"
)
LONG = 3000 if real_server_url() else 20_000
"""Output tokens long enough to still run when the test acts (fits a 4k-context model on a
real server)."""
