"""A tiny OTLP/HTTP metrics receiver on loopback for the tests: accepts POST /v1/metrics, decodes each body as an
`ExportMetricsServiceRequest` with the opentelemetry-proto messages (the collector's own schema, not our SDK's
objects), keeps the requests and their headers, and answers as a collector does (200, an empty
ExportMetricsServiceResponse). The tests read what arrived through `histograms()` and `sums()`.
"""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from tests.helpers import QuietHandler

MAX_BODY = 8 << 20  # a request past this is refused (413): the monitor's exports are a few KB
MAX_REQUESTS = 1000  # kept; the oldest go first


@dataclass(frozen=True)
class Received:
    t: float  # time.monotonic() when it arrived
    headers: dict[str, str]  # lower-cased names
    request: ExportMetricsServiceRequest


@dataclass(frozen=True)
class Point:
    """One data point of one metric, flattened for asserts."""

    name: str
    unit: str
    attributes: dict[str, Any]
    count: int = 0  # histograms
    total: float = 0.0  # the histogram's sum, or the counter's value
    bounds: tuple[float, ...] = ()
    bucket_counts: tuple[int, ...] = ()
    monotonic: bool = False
    temporality: int = 0


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class OTLPReceiver:
    def __init__(self, status: int = 200) -> None:
        receiver = self
        self.status = status
        self._lock = threading.Lock()
        self._received: list[Received] = []

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.path != "/v1/metrics" or length > MAX_BODY:
                    self.send_response(404 if self.path != "/v1/metrics" else 413)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver._add(Received(time.monotonic(), headers, request))
                answer = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()  # a quick close()

    def _add(self, received: Received) -> None:
        with self._lock:
            self._received.append(received)
            del self._received[:-MAX_REQUESTS]

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def points(self, name: str, since: int = 0) -> list[Point]:
        """The data points of metric `name` in the latest request (from the `since`-th on) that has it: exports are
        cumulative, so the latest holds everything recorded up to it."""
        for received in reversed(self.received[since:]):
            found = [p for p in _points(received.request) if p.name == name]
            if found:
                return found
        return []

    def wait_for(self, name: str, count: int, timeout_s: float) -> list[Point]:
        """The latest points of histogram `name`, once their counts add up to `count` (or the timeout passed)."""
        deadline = time.monotonic() + timeout_s
        while True:
            points = self.points(name)
            if sum(p.count for p in points) >= count or time.monotonic() > deadline:
                return points
            time.sleep(0.05)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _points(request: ExportMetricsServiceRequest) -> list[Point]:
    out = []
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                if kind == "histogram":
                    for dp in metric.histogram.data_points:
                        out.append(Point(metric.name, metric.unit, _attributes(dp.attributes), dp.count, dp.sum,
                                         tuple(dp.explicit_bounds), tuple(dp.bucket_counts),
                                         temporality=metric.histogram.aggregation_temporality))  # fmt: skip
                elif kind == "sum":
                    for dp in metric.sum.data_points:
                        value = dp.as_double if dp.WhichOneof("value") == "as_double" else dp.as_int
                        out.append(Point(metric.name, metric.unit, _attributes(dp.attributes), total=value,
                                         monotonic=metric.sum.is_monotonic,
                                         temporality=metric.sum.aggregation_temporality))  # fmt: skip
    return out


def resource_attributes(request: ExportMetricsServiceRequest) -> dict[str, Any]:
    return _attributes(request.resource_metrics[0].resource.attributes)
