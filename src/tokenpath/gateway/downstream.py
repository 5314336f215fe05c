"""The client's side of one exchange: Downstream, the upstream.Sink its upstream connection calls. It forwards the
response head, relays the body read by read (the hot path: upstream_body and upstream_read_done, once per upstream
read), measures the upstream (head time, TTFT, the TTFT the gateway adds) and writes the end: normal, or the
format's error frame. What to do about the head, the body's end or a failure is the exchange's (exchange.py),
which it reports to through Control: the relay never goes through the machine.

Each upstream read is written downstream at once: payload bytes untouched, only the HTTP framing redone for the
client's connection. Two exceptions, both about the stream format's frames (SSE events, event-stream messages,
NDJSON lines; gateway.streamformat picks the format at the head, by route and Content-Type): the bytes of a frame an
upstream read leaves unfinished wait for the read that finishes it (so a stream cut mid-frame never hands the
client half a frame, and its error frame parses whole), and the first frames are classified until the first
content frame, which is the upstream's TTFT.

While the upstream is silent the exchange's keep-alive timer asks for the format's keep-alive (keep_alive): written
between whole frames only (the relay's rule), counted in tokenpath_gateway_keepalives_total, never on the hot path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tokenpath.gateway.exchange_state import End, ExchangeMachine, Phase
from tokenpath.gateway.failures import Failure, FailureKind, Outcome
from tokenpath.gateway.headers import forwarded_head
from tokenpath.gateway.metrics import Metrics
from tokenpath.gateway.relay import Relay, RelayFailure
from tokenpath.gateway.streamformat import for_response
from tokenpath.serve.http import Response
from tokenpath.wire.apis import Api
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.framing import Framing


class Control(Protocol):
    """What the client's side reports to its exchange (exchange.Exchange)."""

    def upstream_head(self, head: ResponseHead) -> None: ...
    def upstream_complete(self) -> None: ...
    def upstream_lost(self, failure: Failure) -> None: ...
    def relay_failed(self, failure: RelayFailure) -> None: ...


class Downstream:
    def __init__(
        self, control: Control, response: Response, api: Api | None, metrics: Metrics, clock: Callable[[], float]
    ) -> None:
        self.control: Control | None = control  # None once the exchange is over (the reference cycle cut)
        self.response = response
        self.api = api  # the route's, for the stream format
        self.metrics = metrics
        self.clock = clock
        self.machine: ExchangeMachine | None = None  # its clock of the last read is set here, once per read
        self.committed = False  # the client has the head: no more failover
        self.status = 0  # the status the client got
        self.framing = Framing.CHUNKED  # how the body is framed to the client (decided by the server core)
        self.upstream_framing = Framing.CHUNKED  # how the upstream framed it (HTTP/2: CLOSE never, END_STREAM ends)
        self.bodiless = False
        self.relay: Relay | None = None  # the relay rules (framing, whole frames only, counting), set at the head
        self.out: list[bytes] = []
        self.t_sent = 0.0  # the request went upstream
        self.t_first_in: float | None = None  # the first body byte from the upstream
        self.added_observed = self.ttft_observed = self.failure_reported = False
        self.end_counted = False  # an abnormal end is counted in the metrics once (count_end)

    # upstream.Sink -------------------------------------------------------------------------------------------
    def upstream_head(self, head: ResponseHead) -> None:
        machine = self.machine
        if machine is not None and self.control is not None:
            if head.status >= 500 and machine.phase is Phase.WAITING:
                self.metrics.errors.labels(f"upstream_{head.status}").inc()
            self.metrics.child(self.metrics.upstream_head, machine.pool.name).observe(self.clock() - self.t_sent)
            self.control.upstream_head(head)  # the machine decides: forward it, or fail over before any byte goes out

    def upstream_body(self, data: bytes) -> None:
        # The hot path: once per upstream read. The relay decides; news (first byte, first token, a frame it cannot
        # hold) is one flag, handled off this path.
        relay = self.relay
        if relay is None or self.bodiless:
            return  # the body of a 5xx we are failing over from, or bytes a bodiless response must not carry
        out = relay.feed(data)
        if out:
            if self.added_observed and not self.out:  # the steady state: nothing queued before it, nothing to observe
                self.response.write(out)
            else:
                self.out.append(out)
        if relay.news:
            self._relay_news(relay)

    def upstream_read_done(self) -> None:
        if self.out:  # the head, or the first frames (their added TTFT observed as they go out)
            self.flush()
        machine = self.machine
        if machine is not None:
            machine.last_read = self.clock()  # ExchangeMachine.read(), inlined: once per read

    def upstream_complete(self) -> None:
        if self.control is not None:
            self.control.upstream_complete()

    def upstream_lost(self, failure: Failure) -> None:
        if self.control is not None:
            self.control.upstream_lost(failure)
        elif failure.kind is FailureKind.INTERNAL:
            # A bug of ours struck in a Sink call that had ended the exchange (and let go of it, in that call):
            # still counted once as the gateway's error, as the exchange counts one after its machine is done.
            self.metrics.errors.labels(Outcome.INTERNAL).inc()

    def _relay_news(self, relay: Relay) -> None:
        relay.news = False
        now = self.clock()
        if self.t_first_in is None:
            self.t_first_in = now
        machine = self.machine
        if relay.first_token and not self.ttft_observed and machine is not None:
            self.ttft_observed = True
            if machine.member is not None:
                machine.member.observe_ttft(now - self.t_sent)  # p2c_ewma routes on the time to the first token
            self.metrics.child(self.metrics.upstream_ttft, machine.pool.name).observe(now - self.t_sent)
        if relay.failure is not None and self.control is not None and not self.failure_reported:
            self.failure_reported = True
            self.control.relay_failed(relay.failure)

    # what the exchange's actions do to the client's response --------------------------------------------------
    def forward_head(self, head: ResponseHead, request_id_header: str, request_id: str) -> None:
        self.committed = True
        self.upstream_framing = head.framing
        self._drop_body()
        self.status = head.status
        forwarded = forwarded_head(head, request_id_header, request_id)
        # Frames are in the decoded bytes; the relay passes encoded ones on untouched, read by read. A cut at "frame
        # boundaries" of gzip bytes would hold a stream until its end (or past the frame limit).
        stream = None if forwarded.encoded else for_response(self.api, forwarded.content_type)
        # A token stream is re-framed (chunked; close-delimited for an HTTP/1.0 client), never announced with the
        # upstream's length: a failure mid-stream ends it with an error frame, which must not make the client read
        # more bytes than a Content-Length said.
        length = None if stream is not None and head.framing is Framing.LENGTH else forwarded.length
        response = self.response
        if head.framing is Framing.NONE:  # HEAD: the length is that of the body a GET would get
            lengths = [("Content-Length", str(length))] if length is not None else []
            self.out.append(response.start_without_body(head.status, forwarded.headers + lengths))
        else:
            self.out.append(response.start(head.status, forwarded.headers, length))
        self.framing = response.framing or Framing.NONE
        self.bodiless = self.framing is Framing.NONE
        self.relay = Relay(stream, self.framing is Framing.CHUNKED)
        if self.machine is not None:  # the keep-alive timer armed with this head reads it
            self.machine.keeps_alive = stream is not None and stream.keepalive is not None and not self.bodiless

    def keep_alive(self) -> None:
        """The upstream has been silent for the keep-alive interval: the format's keep-alive, if the relay says one
        may go now (between whole frames), written on its own and counted. The timer's path, never a read's."""
        relay, machine = self.relay, self.machine
        if relay is None or machine is None or relay.stream is None or self.response.client_gone:
            return
        data = relay.keepalive()
        if data:
            self.out.append(data)  # behind anything not yet written (the head): never ahead of it
            self.flush()
            self.metrics.keepalives.labels(machine.pool.name, relay.stream.api.value).inc()

    def _drop_body(self) -> None:
        """The client is getting the head: no failover can resend the body now, so its memory and its share of the
        worker's body budget are given back at once, not when the stream ends (a long stream would hold both)."""
        response = self.response
        if response.request.body:
            response.request = response.request.without_body()
        response.release_admission()

    def body_ended(self) -> str | None:
        """The upstream body ended: None, its last bytes queued (a last NDJSON line the end completes), or why it
        was cut (inside a frame, or a close-delimited body without the format's final event)."""
        if self.relay is None:
            return None
        rest, cut = self.relay.finish(self.upstream_framing is Framing.CLOSE)
        if rest and cut is None:
            self.out.append(rest)
        return cut

    def finish_body(self) -> None:
        """The response's last bytes, counted before they go out: a client that has read its whole answer finds it
        in /metrics. `close` ends it once the upstream connection is released."""
        self.out.append(self.response.end_bytes())
        self.metrics.child(self.metrics.requests, str(self.status)).inc()
        self.flush()

    def close(self) -> None:
        if self.framing is Framing.CLOSE:
            self.response.close_connection()
        else:
            self.response.write(b"", last=True)

    def end_with_error(self, end: End) -> None:
        """After the first byte there is no failover: end the stream with an explicit error frame in the format's
        own shape (never a fake finish_reason, [DONE] or message_stop) and close the client's connection. The
        bytes of an unfinished frame are dropped, so the error frame is the next thing the client parses, whole.
        The error frame only where the body's end is ours to say (chunked, or close-delimited): never past an
        announced Content-Length. A body of announced length is cut short instead, as nginx does: the client sees
        fewer bytes than announced, then the close."""
        relay = self.relay
        if relay is not None:
            relay.drop_held()
        if self.response.client_gone:
            return
        ours = self.framing in (Framing.CHUNKED, Framing.CLOSE)
        if relay is not None and relay.stream is not None and end.client_reads and ours:
            event = relay.error_frame(end.message, end.code)
            self.out.append(self.response.frame(event) + self.response.end_bytes())
        self.flush()
        self.response.close_connection()

    def flush(self) -> None:
        data = b"".join(self.out) if len(self.out) > 1 else self.out[0] if self.out else b""
        self.out.clear()
        if data:
            self.response.write(data)
        if not self.added_observed and self.t_first_in is not None:
            self.added_observed = True
            self.metrics.added_ttft.observe(self.clock() - self.t_first_in)

    # metrics of the end --------------------------------------------------------------------------------------
    def count_end(self, outcome: Outcome | None) -> None:
        """Once per request, when it ends other than normally: one `errors_total` reason (the outcome), and, when
        the client already has the head, its status in `requests_total` (before the head, reply_error counts the
        error status; a normal end is counted by finish_body). Before the last bytes go out: a client that has
        read its answer finds it in /metrics."""
        if self.end_counted:
            return
        self.end_counted = True
        if outcome is not None:
            self.metrics.errors.labels(outcome).inc()
            if self.committed:
                self.metrics.requests.labels(str(self.status)).inc()

    def count_relayed(self) -> None:
        """The stream's frames and bytes, added to the metrics once, when it ends (never per read)."""
        relay = self.relay
        if relay is not None:
            if relay.frames:
                self.metrics.frames.inc(relay.frames)
            if relay.bytes:
                self.metrics.bytes.inc(relay.bytes)
            relay.frames = relay.bytes = 0
