from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.monitor.test_exporter import STUB, coalesced, exporter, probe
from tokenpath.errors import UsageError
from tokenpath.monitor import otel_names
from tokenpath.monitor.config import Overrides, from_dict
from tokenpath.monitor.metrics import MonitorMetrics
from tokenpath.monitor.probing import OK, ProbeOutcome
from tokenpath.probe.metrics import RunMetrics


def test_the_names_and_buckets_are_the_conventions() -> None:
    assert otel_names.prometheus_name(otel_names.TIME_TO_FIRST_CHUNK) == (
        "gen_ai_client_operation_time_to_first_chunk_seconds"
    )
    assert otel_names.prometheus_name(otel_names.TIME_PER_OUTPUT_CHUNK) == (
        "gen_ai_client_operation_time_per_output_chunk_seconds"
    )
    conventions = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
    assert list(otel_names.BUCKETS) == conventions
    attrs = otel_names.GenAIAttributes.of("openai", "gpt-4o", "https://[::1]:8443/v1", "via")
    assert attrs.otel() == {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                            "gen_ai.request.model": "gpt-4o", "server.address": "::1", "server.port": 8443,
                            "tokenpath.hop": "via"}  # fmt: skip
    assert set(attrs.prometheus("edge")) == set(otel_names.PROMETHEUS_LABELS)
    gemini = otel_names.GenAIAttributes.of("gemini", "g", "https://generativelanguage.googleapis.com", "via")
    assert (gemini.operation, gemini.provider, gemini.server_port) == ("generate_content", "gcp.gemini", 443)
    later = otel_names.GenAIAttributes.of("someday", "m", "http://h", "direct")
    assert (later.operation, later.provider) == ("chat", "someday")  # a custom value, as the conventions allow
    assert attrs.prometheus("edge")["target"] == "edge"


def test_time_per_chunk_is_one_value_per_frame_after_the_first_zero_within_a_read() -> None:
    # three arrivals carrying 1, 5 and 4 frames, 0.2 s and 0.3 s apart
    times = sorted(otel_names.chunk_times((0.2, 0.3), frames=10, arrivals=3))
    assert times == [0.0] * 7 + [0.2, 0.3]
    assert list(otel_names.chunk_times((), frames=1, arrivals=1)) == []
    assert len(list(otel_names.chunk_times((0.1,) * 10, frames=10**7, arrivals=11))) == (
        otel_names.MAX_CHUNK_OBSERVATIONS
    )


def run(ttft_ms: float, bursts: dict[int, int]) -> RunMetrics:
    frames = sum(k * v for k, v in bursts.items())
    arrivals = sum(bursts.values())
    return RunMetrics("s", 200, frames, arrivals, frames / arrivals, 1.0, ttft_ms, {}, bursts, ttft_ms + 100)


def config(names: str) -> dict[str, object]:
    return {"monitor": {"metric_names": names},
            "target": [{"name": "edge", "url": "http://gw.example:8080/v1", "direct_url": "http://10.0.0.5:8000/v1",
                        "model": "m1"}]}  # fmt: skip


def test_the_monitor_with_otel_names_records_the_conventions_histograms() -> None:
    m = MonitorMetrics(from_dict(config("otel")))
    m.record(ProbeOutcome("edge", "via", "tp-1", OK, "", run(300, {5: 2}), (0.25,), 1_700_000_000.0))
    via = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "openai", "gen_ai_request_model": "m1",
           "server_address": "gw.example", "server_port": "8080", "tokenpath_hop": "via", "target": "edge"}  # fmt: skip
    get = m.registry.get_sample_value
    assert get("gen_ai_client_operation_time_to_first_chunk_seconds_sum", via) == 0.3
    assert get("gen_ai_client_operation_time_to_first_chunk_seconds_bucket", {**via, "le": "0.32"}) == 1
    assert get("gen_ai_client_operation_time_to_first_chunk_seconds_bucket", {**via, "le": "0.16"}) == 0
    assert get("gen_ai_client_operation_time_per_output_chunk_seconds_count", via) == 9
    assert get("gen_ai_client_operation_time_per_output_chunk_seconds_bucket", {**via, "le": "0.01"}) == 8
    assert get("tokenpath_monitor_coalescing", {"target": "edge", "route": "via"}) == 5  # kept: the conventions lack it
    text = generate_latest(m.registry).decode()
    assert "tokenpath_monitor_ttft_seconds" not in text
    assert 'server_address="10.0.0.5"' not in text  # the direct route has no TTFT yet: no series


def test_the_default_names_are_tokenpaths_and_have_no_otel_series() -> None:
    m = MonitorMetrics(from_dict(config("tokenpath")))
    m.record(ProbeOutcome("edge", "via", "tp-1", OK, "", run(300, {5: 2}), (0.25,), 1_700_000_000.0))
    assert m.registry.get_sample_value("tokenpath_monitor_ttft_seconds_sum", {"target": "edge", "route": "via"}) == 0.3
    assert "gen_ai_" not in generate_latest(m.registry).decode()


def test_metric_names_is_checked_and_the_flag_wins_over_the_file() -> None:
    with pytest.raises(UsageError, match="`metric_names` must be one of tokenpath, otel, not 'prom'"):
        from_dict(config("prom"))
    data = Overrides(metric_names="otel", max_concurrency=2).apply(config("tokenpath"))
    cfg = from_dict(data)
    assert (cfg.settings.metric_names, cfg.settings.max_concurrency) == ("otel", 2)


def _otel_families(text: str) -> dict[str, tuple[str, frozenset[str], frozenset[str]]]:
    """Each gen_ai family in an exposition: its help, its label names (le apart) and its bucket bounds."""
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("gen_ai_") and not family.name.endswith("_created"):  # the time a series began
            labels = frozenset(k for s in family.samples for k in s.labels if k != "le")
            bounds = frozenset(s.labels["le"] for s in family.samples if "le" in s.labels)
            out[family.name] = (family.documentation, labels, bounds)
    return out


def test_the_monitor_and_the_exporter_build_the_same_conventions_histograms() -> None:
    """One builder (monitor/metrics.py otel_histograms) for both: the same names, labels, buckets and words; only
    the monitor's TTFT says it carries the stream id as an exemplar."""
    m = MonitorMetrics(from_dict(config("otel")))
    m.record(ProbeOutcome("edge", "via", "tp-1", OK, "", run(300, {5: 2}), (0.25,), 1_700_000_000.0))
    monitor = _otel_families(generate_latest(m.registry).decode())
    answer = probe(exporter(lambda c, s: coalesced(), metric_names="otel"), f"target={STUB}")
    exported = _otel_families(answer.body.decode())
    assert (
        set(monitor)
        == set(exported)
        == {
            "gen_ai_client_operation_time_to_first_chunk_seconds",
            "gen_ai_client_operation_time_per_output_chunk_seconds",
        }
    )
    ttft = "gen_ai_client_operation_time_to_first_chunk_seconds"
    assert monitor[ttft][1:] == exported[ttft][1:]
    assert monitor[ttft][0] == exported[ttft][0] + " (exemplar: the stream id)"
    chunk = "gen_ai_client_operation_time_per_output_chunk_seconds"
    assert monitor[chunk] == exported[chunk]
