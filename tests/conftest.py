"""Shared fixtures: the path to ../shared/models (tests that need it skip when absent); debug
mode (verification after every pass) for the whole suite."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# The suite verifies the IR after every pass (users' compiles verify once per pipeline): a
# pass that breaks an invariant is named by the test that exercises it.
os.environ.setdefault("EMBER_DEBUG", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_MODELS = REPO.parent / "shared" / "models"
EXAMPLES = REPO / "examples"


def shared_model_names() -> list[str]:
    if not SHARED_MODELS.is_dir():
        return []
    return sorted(p.stem for p in SHARED_MODELS.glob("*.onnx"))


def require_shared_models() -> Path:
    if not SHARED_MODELS.is_dir():
        pytest.skip(f"../shared/models not found at {SHARED_MODELS}: shared reference models are absent "
                    "(they exist in the team's CI, not in a user's clone)")
    return SHARED_MODELS
