"""``GET /metrics``: Prometheus text whose counters match exactly what a test did to a real server."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from openenv_echo import EnvClient
from openenv_echo.client import ActionValidationError, CapacityReachedError
from tests.server.test_sessions import bpe_tokenizer  # noqa: F401  (fixture)


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(url + "/metrics", trust_env=False)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _get(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted({"env": "echo", **labels}.items()))), 0.0)


def test_counters_match_the_steps_performed(running_server, bpe_tokenizer) -> None:  # noqa: F811
    url = running_server("echo", max_sessions=1, tokenizer=bpe_tokenizer)
    before = _samples(url)
    assert (
        _get(before, "openenv_echo_sessions_active") == 0
        and _get(before, "openenv_echo_steps_total", outcome="ok") == 0
    )
    with EnvClient(url) as env:
        first = env.reset(seed=0, return_tokens=True)
        for word in ("a", "bb", "ccc"):
            env.step({"message": word})
        with pytest.raises(ActionValidationError):
            env.step({"nope": 1})
        during = _samples(url)
        assert _get(during, "openenv_echo_sessions_active") == 1
        with pytest.raises(CapacityReachedError), EnvClient(url) as second:  # max_sessions=1
            second.reset(seed=1)
    after = _samples(url)
    assert _get(after, "openenv_echo_sessions_total") == 1  # the refused one never became a session
    assert _get(after, "openenv_echo_capacity_refusals_total") == 1
    assert _get(after, "openenv_echo_steps_total", outcome="ok") == 3
    assert _get(after, "openenv_echo_steps_total", outcome="error") == 1
    assert _get(after, "openenv_echo_errors_total", code="VALIDATION_ERROR") == 1
    assert _get(after, "openenv_echo_step_duration_seconds_count") == 3
    assert _get(after, "openenv_echo_reset_duration_seconds_count") == 1
    assert _get(after, "openenv_echo_received_bytes_total") > 0 and _get(after, "openenv_echo_sent_bytes_total") > 0
    reset_ids = len(first.tokens.ids) if first.tokens else 0
    assert reset_ids > 0 and _get(after, "openenv_echo_tokens_attached_total") >= reset_ids + 3  # >= 1 id per step
    assert _get(after, "openenv_echo_sessions_active") == 0


def test_metrics_are_per_app(running_server) -> None:
    a, b = running_server("echo"), running_server("echo")
    with EnvClient(a) as env:
        env.reset(seed=0)
        env.step({"message": "x"})
    assert _get(_samples(a), "openenv_echo_steps_total", outcome="ok") == 1
    assert _get(_samples(b), "openenv_echo_steps_total", outcome="ok") == 0
