"""The exporter's decisions without its server: query parsing, the allow-list, the deadline header, the concurrency
cap and the per-probe answer (fake probers returning scripted traces); then its status sniffing on a real socket."""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import accept_each
from tokenpath import errors
from tokenpath.monitor import exporter as ex
from tokenpath.monitor.allowlist import AllowList
from tokenpath.monitor.exporter_metrics import ExporterMetrics
from tokenpath.monitor.modules import Module, ModuleSpec, build, default_modules
from tokenpath.monitor.probing import Aborter, Prober
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.trace import Trace, TraceRecorder
from tokenpath.serve import exposition

MS = 1_000_000
DONE = b"data: [DONE]\n\n"
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CONTENT = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
STUB = "http://127.0.0.1:8000/v1"
ALLOW = AllowList.parse(["http://127.0.0.1:*"])


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def trace_of(reads: list[tuple[int, bytes]]) -> Trace:
    rec = TraceRecorder("s", 0)
    for t_ms, data in reads:
        rec.on_read(t_ms * MS, data)
    return rec.trace


def streamed(ttft_ms: int = 30) -> Trace:
    """Four content frames, one per read, 10 ms apart."""
    reads = [(1, HEAD)] + [(ttft_ms + 10 * i, chunk(CONTENT)) for i in range(4)]
    return trace_of([*reads, (ttft_ms + 40, chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")])


def coalesced() -> Trace:
    """Ten content frames in two reads of five (what stock HAProxy does)."""
    return trace_of([(1, HEAD), (200, chunk(CONTENT * 5)), (450, chunk(CONTENT * 4 + DONE) + b"0\r\n\r\n")])


def factory(prober: Prober) -> ex.ProberFactory:
    return lambda statuses: prober


def config(allow: AllowList = ALLOW, **kw: Any) -> ex.ExporterConfig:
    modules = kw.pop("modules", None) or default_modules({})
    return ex.ExporterConfig(modules, allow, **kw)


def exporter(prober: Prober, **kw: Any) -> ex.ProbeExporter:
    return ex.ProbeExporter(config(**kw), factory(prober))


def probe(e: ex.ProbeExporter, query: str, timeout: str | None = "10") -> ex.Answer:
    return e.handle("GET", "/probe", query, timeout)


def samples(answer: ex.Answer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert answer.status == 200, answer.body
    out = {}
    for family in text_string_to_metric_families(answer.body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(answer: ex.Answer, name: str, **labels: str) -> float | None:
    return samples(answer).get((name, tuple(sorted(labels.items()))))


@pytest.mark.parametrize(
    ("query", "status", "reason", "says"),
    [
        ("", 400, "bad_request", "expected one target=URL"),
        (f"target={STUB}&target={STUB}", 400, "bad_request", "expected one target=URL"),
        (f"target={STUB}&module=a&module=b", 400, "bad_request", "at most one module"),
        (f"target={STUB}&module=nope", 400, "unknown_module", "unknown module 'nope'; this exporter has: openai"),
        ("target=ftp://127.0.0.1/x", 400, "bad_request", "expected http:// or https://"),
        ("target=http://127.0.0.1:8000/" + "a" * 3000, 400, "bad_request", "longer than 2048"),
        ("&".join(f"x{i}=1" for i in range(40)), 400, "bad_request", "more than 16 query parameters"),
        ("target=http://10.0.0.1:8000/v1", 403, "not_allowed", "not matched by any --allow pattern"),
        ("target=http://127.0.0.1:8000@10.0.0.1/v1", 403, "not_allowed", "not matched"),  # userinfo is not the host
        # a target is probed as written or not at all: never sent raw into a request line, never re-encoded
        ("target=http://127.0.0.1:8000/v1/a%20b", 400, "bad_request", "' ', a space or a control character"),
        ("target=http://127.0.0.1:8000/v1/a%00b", 400, "bad_request", "'\\x00', a space or a control character"),
        ("target=http://127.0.0.1:8000/v1%0D%0AX-Forged:%201", 400, "bad_request", "'\\r', a space or a control"),
        ("target=http://127.0.0.1:8000/v1/%E4%B8%AD", 400, "bad_request", "which is not ASCII: percent-encode"),
        ("target=http://127.0.0.1:8000/v1/%25zz", 400, "bad_request", "'%zz', which is not a %-escape"),
        ("target=http://127.0.0.1:8000/v1?q=%25", 400, "bad_request", "'%', which is not a %-escape"),
        # a path a server could resolve to another is refused whatever --allow says
        ("target=http://127.0.0.1:8000/v1/../internal/v1", 400, "bad_request", "target: URL"),
        ("target=http://127.0.0.1:8000/v1/%252E%252e/internal", 400, "bad_request", "dot segment"),
    ],
)
def test_a_request_it_will_not_probe_gets_one_line_and_is_counted(
    query: str, status: int, reason: str, says: str
) -> None:
    calls: list[str] = []
    e = exporter(lambda c, s: calls.append(c.url) or streamed())  # type: ignore[func-returns-value]
    answer = probe(e, query)
    assert (answer.status, calls) == (status, [])
    assert says in answer.body.decode()
    assert answer.body.count(b"\n") == 1
    assert e.metrics.registry.get_sample_value("tokenpath_exporter_probes_refused_total", {"reason": reason}) == 1


def test_a_refusal_is_logged_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tokenpath.monitor")
    answer = probe(exporter(lambda c, s: streamed()), "target=http://127.0.0.1:8000/v1/%E4%B8%AD")
    records = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    assert records == [{"event": "refused", "status": 400, "reason": "bad_request",
                        "message": answer.body.decode().strip()}]  # fmt: skip
    assert "which is not ASCII" in records[0]["message"]


def test_without_allow_every_probe_is_refused_and_the_answer_says_to_pass_allow() -> None:
    e = exporter(lambda c, s: streamed(), allow=AllowList())
    answer = probe(e, f"target={STUB}")
    assert answer.status == 403
    assert b"--allow" in answer.body
    assert e.metrics.registry.get_sample_value("tokenpath_exporter_probes_refused_total",
                                               {"reason": "no_allow_list"}) == 1  # fmt: skip


def test_an_allowed_target_is_probed_and_the_module_defaults_to_the_first() -> None:
    seen: list[ProbeConfig] = []

    def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
        seen.append(cfg)
        return streamed()

    e = exporter(prober)
    answer = probe(e, f"target={STUB}")
    assert [c.url for c in seen] == [STUB]
    assert seen[0].model == "tokenpath-stub"
    assert value(answer, "probe_success") == 1
    assert value(answer, "probe_http_status_code") == 200
    assert value(answer, "tokenpath_probe_ttft_seconds", route="via") == pytest.approx(0.03)
    assert value(answer, "tokenpath_probe_ttfb_seconds", route="via") == pytest.approx(0.001)
    assert value(answer, "tokenpath_probe_frames_per_read", route="via") == 1
    assert value(answer, "tokenpath_probe_coalescing", route="via") == 1
    assert value(answer, "tokenpath_probe_frame_gap_max_seconds", route="via") == pytest.approx(0.01)
    assert e.metrics.registry.get_sample_value("tokenpath_exporter_probes_total",
                                               {"module": "openai", "outcome": "ok"}) == 1  # fmt: skip


@pytest.mark.parametrize(
    ("header", "budget"),
    [(None, 30.0), ("10", 9.5), ("2", 1.8), ("1", 0.9), ("120", 30.0)],  # none: the module's total; never over it
)
def test_the_deadline_is_the_scrape_timeout_minus_a_margin_capped_by_the_module(
    header: str | None, budget: float
) -> None:
    assert ex.probe_budget_s(header, 30.0) == pytest.approx(budget)
    seen: list[float] = []

    def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
        seen.append(cfg.total_timeout_s)
        return streamed()

    assert probe(exporter(prober), f"target={STUB}", header).status == 200
    assert seen[0] == pytest.approx(budget, abs=0.05)  # the probe itself runs within it


@pytest.mark.parametrize("header", ["abc", "-1", "0", "nan", "inf", ""])
def test_a_deadline_header_that_is_not_seconds_is_refused(header: str) -> None:
    answer = probe(exporter(lambda c, s: streamed()), f"target={STUB}", header)
    assert answer.status == 400
    assert ex.SCRAPE_TIMEOUT_HEADER.encode() in answer.body


def test_past_max_concurrency_a_probe_is_answered_503_at_once_and_counted_as_dropped() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
        started.release()
        assert release.wait(10)
        return streamed()

    e = exporter(prober, max_concurrency=2)
    answers: list[ex.Answer] = []
    threads = [threading.Thread(target=lambda: answers.append(probe(e, f"target={STUB}"))) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in threads:
        assert started.acquire(timeout=10)
    reg = e.metrics.registry
    assert reg.get_sample_value("tokenpath_exporter_probes_in_flight") == 2
    busy = probe(e, f"target={STUB}")
    assert busy.status == 503
    assert b"--max-concurrency" in busy.body
    assert reg.get_sample_value("tokenpath_exporter_probes_dropped_total") == 1
    release.set()
    for t in threads:
        t.join(10)
    assert [a.status for a in answers] == [200, 200]
    assert reg.get_sample_value("tokenpath_exporter_probes_in_flight") == 0
    assert probe(e, f"target={STUB}").status == 200  # the slots are given back


def test_each_answer_is_that_probe_only() -> None:
    traces: Iterator[Trace] = iter([coalesced()])

    def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
        trace = next(traces, None)
        if trace is None:
            raise errors.ConnectError("connection refused")
        return trace

    e = exporter(prober)
    first = probe(e, f"target={STUB}")
    assert value(first, "tokenpath_probe_coalescing", route="via") == 5
    assert value(first, "tokenpath_probe_frames_per_read", route="via") == 5
    second = probe(e, f"target={STUB}")
    assert value(second, "probe_success") == 0
    assert value(second, "probe_http_status_code") == 0
    assert value(second, "tokenpath_probe_failure", route="via", reason="connect") == 1
    names = {name for name, _ in samples(second)}
    assert "tokenpath_probe_coalescing" not in names  # nothing left over from the first probe
    assert "tokenpath_probe_ttft_seconds" not in names
    assert e.metrics.registry.get_sample_value("tokenpath_exporter_probes_total",
                                               {"module": "openai", "outcome": "connect"}) == 1  # fmt: skip


def test_a_refused_status_is_reported_from_what_the_probe_saw() -> None:
    def make(statuses: list[int]) -> Prober:
        def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
            statuses.append(302)
            raise errors.HTTPStatusError("HTTP 302 from http://127.0.0.1:8000 (a redirect, not followed): ")

        return prober

    e = ex.ProbeExporter(config(), make)
    answer = probe(e, f"target={STUB}")
    assert value(answer, "probe_success") == 0
    assert value(answer, "probe_http_status_code") == 302
    assert value(answer, "tokenpath_probe_failure", route="via", reason="http_status") == 1


def modules_with_direct(template: str = "http://{host}:9000/v1") -> dict[str, Module]:
    return {"m": build("m", ModuleSpec(direct_url=template), {})}


def test_a_module_with_a_direct_url_probes_around_the_path_and_reports_added_ttft() -> None:
    seen: list[str] = []

    def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
        seen.append(cfg.url)
        return streamed(250 if ":8000" in cfg.url else 50)

    e = exporter(prober, modules=modules_with_direct())
    answer = probe(e, f"target={STUB}&module=m")
    assert seen == [STUB, "http://127.0.0.1:9000/v1"]  # via first: its result is the probe's
    assert value(answer, "tokenpath_probe_added_ttft_seconds") == pytest.approx(0.2)
    assert value(answer, "tokenpath_probe_ttft_seconds", route="direct") == pytest.approx(0.05)


def test_a_direct_url_outside_the_allow_list_is_refused_before_any_probe() -> None:
    seen: list[str] = []
    e = exporter(lambda c, s: seen.append(c.url) or streamed(), modules=modules_with_direct("http://10.9.9.9/v1"))  # type: ignore[func-returns-value]
    answer = probe(e, f"target={STUB}&module=m")
    assert answer.status == 403
    assert b"direct_url" in answer.body
    assert seen == []


def test_the_direct_route_gets_what_is_left_of_the_deadline() -> None:
    now = [0.0]
    seen: list[float] = []

    def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
        seen.append(cfg.total_timeout_s)
        now[0] += 3.0  # every route takes 3 s
        return streamed()

    cfg = config(modules=modules_with_direct())
    query = f"target={STUB}&module=m"
    answer = ex.ProbeExporter(cfg, factory(prober), clock=lambda: now[0]).handle("GET", "/probe", query, "4")
    assert seen == [pytest.approx(3.6), pytest.approx(0.6)]
    assert value(answer, "probe_duration_seconds") == 6
    now[0] = 0.0
    seen.clear()
    answer = ex.ProbeExporter(cfg, factory(prober), clock=lambda: now[0]).handle("GET", "/probe", query, "3")
    assert seen == [pytest.approx(2.7)]  # nothing left for direct: not probed, said so
    assert value(answer, "tokenpath_probe_failure", route="direct", reason="total_timeout") == 1
    assert value(answer, "probe_success") == 1


def test_otel_names_give_the_conventions_histograms_with_their_labels() -> None:
    e = exporter(lambda c, s: coalesced(), metric_names="otel")
    answer = probe(e, f"target={STUB}")
    labels = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "openai",
              "gen_ai_request_model": "tokenpath-stub", "server_address": "127.0.0.1", "server_port": "8000",
              "tokenpath_hop": "via", "target": STUB}  # fmt: skip
    ttft = "gen_ai_client_operation_time_to_first_chunk_seconds"
    assert value(answer, f"{ttft}_count", **labels) == 1
    assert value(answer, f"{ttft}_sum", **labels) == pytest.approx(0.2)
    assert value(answer, f"{ttft}_bucket", **labels, le="0.16") == 0
    assert value(answer, f"{ttft}_bucket", **labels, le="0.32") == 1
    chunk_time = "gen_ai_client_operation_time_per_output_chunk_seconds"
    assert value(answer, f"{chunk_time}_count", **labels) == 9  # ten frames: nine after the first
    assert value(answer, f"{chunk_time}_bucket", **labels, le="0.01") == 8  # eight came 0 s after the one before
    assert value(answer, f"{chunk_time}_sum", **labels) == pytest.approx(0.25)
    assert value(answer, "tokenpath_probe_coalescing", route="via") == 5  # what the conventions lack, kept
    names = {name for name, _ in samples(answer)}
    assert "tokenpath_probe_ttft_seconds" not in names


@pytest.mark.parametrize(("method", "path", "status"), [("GET", "/", 404), ("POST", "/probe", 405)])
def test_other_paths_and_methods(method: str, path: str, status: int) -> None:
    assert exporter(lambda c, s: streamed()).handle(method, path, f"target={STUB}", None).status == status


def test_the_config_checks_its_own_bounds() -> None:
    with pytest.raises(errors.UsageError, match="max_concurrency"):
        config(max_concurrency=0)
    with pytest.raises(errors.UsageError, match="metric_names"):
        config(metric_names="prom")
    with pytest.raises(errors.UsageError, match="metrics_listen"):
        config(listen="nowhere")
    built = ex.build_config(None, ["http://127.0.0.1:*"], None, 3, "otel", env={})
    assert (built.max_concurrency, built.metric_names, list(built.modules)) == (3, "otel", ["openai"])


def test_the_exporters_own_series_exist_before_any_probe() -> None:
    reg = ExporterMetrics(["a", "b"]).registry
    assert reg.get_sample_value("tokenpath_exporter_probes_total", {"module": "b", "outcome": "ok"}) == 0
    assert reg.get_sample_value("tokenpath_exporter_probes_refused_total", {"reason": "not_allowed"}) == 0


# --- the real prober's status sniffing and the served app, on loopback -----------------------------------------


def scripted(answer: bytes) -> Callable[[socket.socket], None]:
    def handle(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(answer)

    return handle


@pytest.fixture
def served() -> Iterator[Callable[[bytes], tuple[str, list[int]]]]:
    """Scripted targets (each answers every request with the given bytes) and how many connections each got."""
    listeners: list[socket.socket] = []

    def serve(answer: bytes) -> tuple[str, list[int]]:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)
        hits: list[int] = []
        handle = scripted(answer)

        def counted(conn: socket.socket) -> None:
            hits.append(1)
            handle(conn)

        accept_each(listener, counted)
        return f"http://127.0.0.1:{listener.getsockname()[1]}/v1", hits

    yield serve
    for listener in listeners:
        listener.close()


@pytest.mark.parametrize(
    ("answer", "status", "reason"),
    [
        (b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n", 503,
         "http_status"),  # was 103: the first status line's
        (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (70 << 10), 0,
         "response_too_large"),  # was 200, for a head the probe refused (past 64 KB and still open)
    ],
)  # fmt: skip
def test_the_status_reported_is_the_final_heads_that_the_probe_took(
    served: Callable[[bytes], tuple[str, list[int]]], answer: bytes, status: int, reason: str
) -> None:
    target, _ = served(answer)
    e = ex.ProbeExporter(config(AllowList.parse([target.removesuffix("/v1") + "/*"])),
                         ex.sniffing_prober(Aborter()))  # fmt: skip
    got = probe(e, f"target={target}", "5")
    assert value(got, "probe_success") == 0
    assert value(got, "tokenpath_probe_failure", route="via", reason=reason) == 1
    assert value(got, "probe_http_status_code") == status


def test_a_redirect_is_a_failed_probe_with_its_status_and_its_location_is_never_contacted(
    served: Callable[[bytes], tuple[str, list[int]]],
) -> None:
    elsewhere, elsewhere_hits = served(HEAD + chunk(CONTENT) + b"0\r\n\r\n")
    redirect = f"HTTP/1.1 302 Found\r\nLocation: {elsewhere}/chat/completions\r\nContent-Length: 0\r\n\r\n"
    target, hits = served(redirect.encode())
    e = ex.ProbeExporter(config(AllowList.parse([target.removesuffix("/v1") + "/*"])),
                         ex.sniffing_prober(Aborter()))  # fmt: skip
    answer = probe(e, f"target={target}", "5")
    assert value(answer, "probe_success") == 0
    assert value(answer, "probe_http_status_code") == 302
    assert value(answer, "tokenpath_probe_failure", route="via", reason="http_status") == 1
    assert (len(hits), elsewhere_hits) == (1, [])


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/v1/../internal/v1", "dot segment"),  # a path-normalising server would serve /internal/v1
        ("/v1/%2E%2e/internal/v1", "dot segment"),
        ("/v1/\u4e2d", "not ASCII"),  # was a UnicodeEncodeError in the request line: outcome `internal`
        ("/v1/a b", "a space"),  # was sent raw: `POST /v1/a b/chat/completions HTTP/1.1`
    ],
)
def test_a_target_outside_what_may_be_sent_is_answered_400_and_never_contacted(
    served: Callable[[bytes], tuple[str, list[int]]], path: str, says: str
) -> None:
    target, hits = served(HEAD + chunk(CONTENT) + b"0\r\n\r\n")
    base = target.removesuffix("/v1")
    e = ex.ProbeExporter(config(AllowList.parse([f"{base}/v1/*"])), ex.sniffing_prober(Aborter()))
    answer = probe(e, "target=" + quote(base + path, safe=":/"), "5")  # the target, as Prometheus would send it
    assert (answer.status, hits) == (400, [])
    assert says in answer.body.decode()


def test_the_app_serves_probe_and_metrics_over_http(served: Callable[[bytes], tuple[str, list[int]]]) -> None:
    target, _ = served(HEAD + chunk(CONTENT) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    e = ex.ProbeExporter(config(), ex.sniffing_prober(Aborter()))
    httpd = exposition.serve_app("127.0.0.1", 0, ex.wsgi_app(e), threads=2)
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        request = urllib.request.Request(f"{base}/probe?target={target}", headers={ex.SCRAPE_TIMEOUT_HEADER: "5"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["Content-Type"] == ex.PROBE_CONTENT_TYPE
            body = response.read().decode()
        assert "probe_success 1.0" in body
        assert "probe_http_status_code 200.0" in body
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/probe?target=http://10.0.0.1/v1", timeout=10)
        assert refused.value.code == 403
        refused.value.close()
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
            text = response.read().decode()
        assert 'tokenpath_exporter_probes_total{module="openai",outcome="ok"} 1.0' in text
        assert 'tokenpath_exporter_probes_refused_total{reason="not_allowed"} 1.0' in text
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_closing_the_app_aborts_a_probe_in_flight() -> None:
    import asyncio
    import time

    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        target = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        app = ex.ExporterApp(config(listen="127.0.0.1:0"))
        asyncio.run(app.start())
        answers: list[int] = []
        bodies: list[bytes] = []

        def scrape() -> None:
            request = urllib.request.Request(f"{app.url}/probe?target={target}",
                                             headers={ex.SCRAPE_TIMEOUT_HEADER: "60"})  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    answers.append(response.status)
            except urllib.error.HTTPError as refused:
                answers.append(refused.code)
                bodies.append(refused.read())

        scraping = threading.Thread(target=scrape)
        scraping.start()
        conn, _ = silent.accept()  # the probe is waiting for its first byte now (30 s by default)
        with conn:
            started = time.monotonic()
            asyncio.run(app.close())
            scraping.join(10)
            assert time.monotonic() - started < 5
        # answered at once instead of waiting out its timeouts, and 503: a 200 with probe_success 0 and the abort's
        # error blamed the target for every probe in flight at each rollout
        assert answers == [503]
        assert bodies == [ex.STOPPING]
        counted = [s.value for m in app.exporter.metrics.registry.collect() for s in m.samples
                   if s.name == "tokenpath_exporter_probes_total"]  # fmt: skip
        assert sum(counted) == 0  # nor counted as a probe of the target


def test_the_otel_provider_is_the_modules_api_format() -> None:
    modules = {"claude": build("claude", ModuleSpec(api="anthropic", model="claude-x"), {})}
    seen: list[str] = []

    def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
        seen.append(str(cfg.api))
        return streamed()

    answer = probe(exporter(prober, modules=modules, metric_names="otel"), f"target={STUB}&module=claude")
    ttft = [s for s in samples(answer) if s[0] == "gen_ai_client_operation_time_to_first_chunk_seconds_count"]
    labels = dict(ttft[0][1])
    assert (labels["gen_ai_provider_name"], labels["gen_ai_request_model"]) == ("anthropic", "claude-x")
    assert seen == ["anthropic"]  # and the probe asked in that format


def test_a_direct_url_that_is_the_target_itself_is_refused_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 35: the reason was in the 400's body, never in the exporter's log."""
    caplog.set_level(logging.WARNING, logger="tokenpath.monitor")
    seen: list[str] = []
    e = exporter(lambda c, s: seen.append(c.url) or streamed(), modules=modules_with_direct("{target}"))  # type: ignore[func-returns-value]
    answer = probe(e, f"target={STUB}&module=m")
    assert (answer.status, seen) == (400, [])
    records = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    assert [(r["event"], r["reason"]) for r in records] == [("refused", "bad_request")]
    assert records[0]["message"] == answer.body.decode().strip()
    assert "direct_url" in records[0]["message"]


def test_a_stream_cut_before_its_final_event_is_named_and_never_measured_as_whole() -> None:
    cut = trace_of([(1, HEAD), (200, chunk(CONTENT * 3)), (450, chunk(CONTENT) + b"0\r\n\r\n")])  # no [DONE]
    answer = probe(exporter(lambda c, s: cut), f"target={STUB}")
    assert value(answer, "probe_success") == 0
    assert value(answer, "tokenpath_probe_stream_end", route="via", end="cut_silent") == 1
    assert value(answer, "tokenpath_probe_failure", route="via", reason="cut_silent") == 1
    at = value(answer, "tokenpath_probe_stream_end_seconds", route="via")
    assert at is not None
    assert at > 0.4  # the end came with the last read, 450 ms after the request
    assert value(answer, "tokenpath_probe_frames_per_read", route="via") is None  # a short stream's: not reported
    assert value(answer, "tokenpath_probe_ttft_seconds", route="via") is None
    whole = probe(exporter(lambda c, s: coalesced()), f"target={STUB}")
    assert value(whole, "tokenpath_probe_stream_end", route="via", end="complete") == 1
    assert value(whole, "probe_success") == 1


def test_a_real_probe_of_a_stream_ended_by_its_last_chunk_without_done_is_cut_silent(
    served: Callable[[bytes], tuple[str, list[int]]],
) -> None:
    target, _ = served(HEAD + chunk(CONTENT) + b"0\r\n\r\n")  # what a gateway sends when its upstream went away
    e = ex.ProbeExporter(config(), ex.sniffing_prober(Aborter()))
    answer = probe(e, f"target={target}", "5")
    assert value(answer, "probe_success") == 0
    assert value(answer, "tokenpath_probe_stream_end", route="via", end="cut_silent") == 1
    assert (
        e.metrics.registry.get_sample_value(
            "tokenpath_exporter_probes_total", {"module": "openai", "outcome": "cut_silent"}
        )
        == 1
    )


def test_a_cut_stream_gives_no_added_ttft_on_either_route() -> None:
    cut = trace_of([(1, HEAD), (20, chunk(CONTENT)), (40, chunk(CONTENT) + b"0\r\n\r\n")])  # TTFT 20 ms, no [DONE]
    for via_cut in (True, False):  # the path's stream cut, or the one around it

        def prober(cfg: ProbeConfig, stream_id: str, via_cut: bool = via_cut) -> Trace:
            return cut if (":8000" in cfg.url) == via_cut else streamed(250)

        answer = probe(exporter(prober, modules=modules_with_direct()), f"target={STUB}&module=m")
        assert value(answer, "tokenpath_probe_added_ttft_seconds") is None


def test_the_otel_target_label_masks_the_targets_query_and_credentials() -> None:
    """The label carried `?api_key=...` (and `user:password@`) as Prometheus sent the target; the log line did not."""
    e = exporter(lambda c, s: coalesced(), metric_names="otel")
    answer = probe(e, "target=http%3A%2F%2F127.0.0.1%3A8000%2Fv1%3Fapi_key%3DQS3CRET")
    targets = {dict(labels).get("target") for _, labels in samples(answer) if "target" in dict(labels)}
    assert targets == {"http://127.0.0.1:8000/v1?***"}
