"""Fixtures of the Ray tests: Ray kept from starting in this process (``too_many`` workers: tests/fixtures_system.py).

A conftest of a package (this folder has an ``__init__.py``): a second top-level ``conftest`` module would replace the
root one in ``sys.modules``."""
from __future__ import annotations

import pytest


@pytest.fixture()
def no_ray_start(monkeypatch):
    """Ray not running in this process, and failing the test if anything starts it."""
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("Ray was started for a refused worker count"))
    monkeypatch.delenv("RAY_OVERRIDE_RESOURCES", raising=False)
    return ray
