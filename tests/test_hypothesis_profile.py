"""Every property test runs without Hypothesis's timing checks (tests/conftest.py): no deadline per example, no
too-slow health check on generation."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def test_the_loaded_profile_asserts_no_timing() -> None:
    loaded = settings.default
    assert loaded is not None
    assert loaded.deadline is None
    assert HealthCheck.too_slow in loaded.suppress_health_check
