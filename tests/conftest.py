"""Shared fixtures. Synthetic batch builders live in tests/synthetic.py (``from synthetic import ...``)."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
