"""OpenTelemetry's GenAI semantic conventions as tokenpath reports them: the two client histograms, their bucket
boundaries and attributes, in OTel form (for OTLP) and in Prometheus form (for /metrics), plus what the conventions'
words mean in ours. One module, so the monitor's metrics, the exporter and the OTLP export name things alike.

Source: OpenTelemetry semantic conventions, "Semantic conventions for generative AI metrics"
(open-telemetry/semantic-conventions-genai, docs/gen-ai/gen-ai-metrics.md; also semantic-conventions v1.41.0):

- `gen_ai.client.operation.time_to_first_chunk`: histogram, unit `s`, "measured from when the client issues the
  generation request to when the first chunk is received in the response stream"; streaming calls only.
- `gen_ai.client.operation.time_per_output_chunk`: histogram, unit `s`, "recorded for each chunk received after the
  first one, measured as the time elapsed from the end of the previous chunk to the end of the current chunk".
- both "SHOULD be specified with ExplicitBucketBoundaries of [0.01, 0.02, 0.04, ..., 40.96, 81.92]".
- attributes: `gen_ai.operation.name` (required; `chat` for the OpenAI Chat API), `gen_ai.provider.name`
  (required; `openai`, `anthropic`, `aws.bedrock`, `gcp.gemini` ...), `gen_ai.request.model` (if available),
  `server.address` (recommended) and `server.port` (conditionally required with `server.address`).

In tokenpath's words: a chunk is a frame (one SSE event); the first chunk is the first *content* frame (our TTFT,
docs' definitions: a role-only delta is not a token); chunks are timed by their arrival (the read that completed
them), so frames a proxy coalesced into one read are 0 s apart — which is what such a proxy does to a user.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tokenpath.probe.transport import parse_target
from tokenpath.wire.apis import spec_named

TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
TIME_PER_OUTPUT_CHUNK = "gen_ai.client.operation.time_per_output_chunk"
UNIT = "s"
# The conventions' ExplicitBucketBoundaries for both histograms (doubling from 10 ms to 81.92 s).
BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)

OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
HOP = "tokenpath.hop"  # ours: `via` the path under watch, or `direct` around it (the monitor's `route`)
TARGET_LABEL = "target"  # ours, Prometheus form only: the monitor's target name, as on every other series

# How each probe's stream ended (wire/ending.py: complete, cut_error, cut_silent), counted under this name (OTLP;
# `tokenpath_monitor_stream_ends_total` on /metrics) with the kind as END: the conventions have no word for a cut.
# A probe that never began a stream (no connection, a timeout of ours) has no end and is not counted here.
STREAM_ENDS = "tokenpath.monitor.stream_ends"
END = "tokenpath.end"  # ours: the OTLP attribute naming the kind
END_LABEL = "end"  # its Prometheus label, beside `target` and `route` as on every tokenpath series

# `metric_names`: tokenpath's own names for everything, or these conventions' where they have one (TTFT, and time
# per output chunk) and tokenpath's for what they lack (TTFB, added TTFT, frames per read, coalescing, gaps).
TOKENPATH, OTEL = "tokenpath", "otel"
NAMINGS = (TOKENPATH, OTEL)

# Per probe, time_per_output_chunk observes one value per frame after the first. A stream can hold millions of
# frames (a hostile one more); past this many the rest are not observed (the figures of a probe are its first
# this-many chunks, far beyond a synthetic probe's few dozen tokens).
MAX_CHUNK_OBSERVATIONS = 8192


def prometheus_name(name: str, unit: str = UNIT) -> str:
    """OTel → Prometheus (the OpenTelemetry compatibility spec): dots become underscores, unit `s` adds `_seconds`."""
    base = name.replace(".", "_")
    return f"{base}_seconds" if unit == "s" else base


def prometheus_label(attribute: str) -> str:
    return attribute.replace(".", "_")


@dataclass(frozen=True, slots=True)
class GenAIAttributes:
    """The conventions' attributes of one route of one target (plus ours: the hop)."""

    operation: str
    provider: str
    model: str
    server_address: str
    server_port: int
    hop: str

    @classmethod
    def of(cls, api: str, model: str, url: str, hop: str) -> GenAIAttributes:
        """`url` is the endpoint the client talks to: on the `via` hop, the path's front door (the conventions'
        "behind any intermediaries" is not knowable from outside, and the difference is what tokenpath measures)."""
        spec = spec_named(api)
        # Each format's spec names the conventions' well-known values (wire/formats/); a format they lack is a custom
        # value, as the conventions allow: its own name.
        operation, provider = (spec.otel_operation, spec.otel_provider) if spec is not None else ("chat", api)
        target = parse_target(url)
        return cls(operation, provider, model, target.host, target.port, hop)

    def otel(self) -> dict[str, str | int]:
        return {
            OPERATION_NAME: self.operation,
            PROVIDER_NAME: self.provider,
            REQUEST_MODEL: self.model,
            SERVER_ADDRESS: self.server_address,
            SERVER_PORT: self.server_port,
            HOP: self.hop,
        }

    def prometheus(self, target: str) -> dict[str, str]:
        labels = {prometheus_label(k): str(v) for k, v in self.otel().items()}
        labels[TARGET_LABEL] = target
        return labels


_ATTRIBUTES = (OPERATION_NAME, PROVIDER_NAME, REQUEST_MODEL, SERVER_ADDRESS, SERVER_PORT, HOP)
PROMETHEUS_LABELS = (*(prometheus_label(a) for a in _ATTRIBUTES), TARGET_LABEL)


def chunk_times(gaps_s: tuple[float, ...], frames: int, arrivals: int) -> Iterator[float]:
    """time_per_output_chunk's observations for one stream, from its arrival gaps and counts: each arrival after the
    first brings its first frame after its gap, and every other frame of an arrival came in the same read (0 s).
    That is frames - 1 values in all (order does not matter to a histogram), at most MAX_CHUNK_OBSERVATIONS."""
    left = MAX_CHUNK_OBSERVATIONS
    for gap in gaps_s[: arrivals - 1]:
        if left <= 0:
            return
        left -= 1
        yield gap
    for _ in range(min(max(frames - arrivals, 0), left)):
        yield 0.0
