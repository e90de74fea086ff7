"""Fixtures of the lm room: an isolated DSPy response cache and the assembled embedded model."""
from __future__ import annotations

import os

import dspy
import pytest


@pytest.fixture(autouse=True)
def isolated_dspy_cache():
    """Each test gets its own in-memory DSPy cache; nothing lands in ~/.dspy_cache or leaks between
    tests (a disk cache would cost ~1 s per test to create)."""
    saved = dspy.cache
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    yield dspy.cache
    dspy.cache = saved


@pytest.fixture(scope="session")
def embedded_model_name() -> str:
    return os.environ.get("REFLECT_SQL_TEST_LOCAL_MODEL", "qwen2.5-coder-1.5b")


@pytest.fixture(scope="session")
def embedded_settings(embedded_model_name):
    """Settings whose generator is the embedded model, assembled into the configured model dir."""
    from reflect_sql.lm.models import ModelError, ensure_model
    from reflect_sql.settings import load_settings

    settings = load_settings(overrides={"lm": f"local/{embedded_model_name}", "lm_cache": False})
    try:
        ensure_model(embedded_model_name, settings.model_dir)
    except ModelError as exc:
        pytest.skip(f"embedded model unavailable: {exc}")
    return settings
