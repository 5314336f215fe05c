"""Incremental, bounded decoding of a response's Content-Encoding (RFC 9110 §8.4), sans-IO.

    decoder = decoder_for(head.header("content-encoding"))   # raises ContentEncodingError for an unknown coding
    decoded = decoder.feed(body_bytes)     # what this read made available; b"" when it only fed the decompressor
    decoder.end()                          # the body ended: raises if it ended inside the compressed stream
    accepts_coding(request.header("accept-encoding"), "gzip")   # what a client asked for (q-values honoured)

Codings: `gzip` (and its alias `x-gzip`), `deflate` (zlib-wrapped as RFC 9110 says, or raw deflate as some servers
send it and browsers accept: told apart by the first two bytes), `br` (PyPI `brotli`), `zstd` (the stdlib's
`compression.zstd` API; PyPI `backports.zstd` before Python 3.14), `identity`. A stacked header ("gzip, br": gzip
applied first) is decoded in reverse order. Anything else is ContentEncodingError(reason="unsupported").

Bounded: every decompressor is asked for at most the bytes still allowed (its own max_length / output limit), so a
bomb is refused after allocating no more than the limit, never decoded and then measured. Three limits, each named:
the output of one feed (`max_feed_output`), of the whole body (`max_output`), and per compressed byte
(`max_ratio`, judged once `ratio_grace` bytes have come out, so a small flushed event is never a "bomb"). In a
stack each layer has the same limits. Failures are ContentEncodingError with `reason` "corrupt", "truncated" or
"too_large".

Under compression the caller counts frames in the decoded stream: a read whose decoded bytes complete a frame is an
arrival; a read that only fed the decompressor (b"" back) is a read, not an arrival (the design's definition).

Why not PyPI `zstandard`: its streaming decompressor (decompressobj) joins the whole output of a call with no
limit, and its stream writer cannot say whether a frame ended, so neither a bomb nor a truncated body could be
refused as above.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import brotli  # type: ignore[import-untyped]

from tokenpath.errors import ContentEncodingError
from tokenpath.wire.acceptencoding import IDENTITY

if sys.version_info >= (3, 14):
    from compression import zstd as zstd  # re-exported: the tests' encoder uses the same module
else:
    from backports import zstd as zstd

# One read (typically <= 256 KiB on the wire) decoding to more than this is a bomb; the SSE parser holds at most
# 8 MiB per event (wire/sse.py MAX_EVENT_BYTES), so twice that still passes any event a server can send in one go.
MAX_FEED_OUTPUT = 16 << 20
# A whole decoded body: a 100k-token stream of 150-byte chunks is ~15 MB, padded frames a few hundred MB at most.
MAX_OUTPUT = 256 << 20
# Decoded bytes per compressed byte. Deflate cannot pass ~1032:1; brotli and zstd can reach millions. Streams of
# the stub's dot-padded frames compress to a few hundred to one, so 10,000 leaves them room.
MAX_RATIO = 10_000
# The ratio is judged only past this much output: a tiny compressed input may legitimately decode to much more.
RATIO_GRACE = 4 << 20
# At most this many codings in one header: more is no real server's doing, and each layer holds a decompressor.
MAX_CODINGS = 4
# Pulls from one decompressor per feed: each either moves the input on or ends in a bomb error (gzip members and
# zstd frames restart the loop with fewer bytes left); more than this is a decompressor that stopped progressing.
MAX_STEPS_PER_FEED = 1 << 16

SUPPORTED = ("gzip", "deflate", "br", "zstd")
_ALIASES = {"x-gzip": "gzip"}
_PREVIEW_BYTES = 16  # of a body in an error message


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    max_feed_output: int = MAX_FEED_OUTPUT
    max_output: int = MAX_OUTPUT
    max_ratio: float = MAX_RATIO
    ratio_grace: int = RATIO_GRACE

    def __post_init__(self) -> None:
        if min(self.max_feed_output, self.max_output, self.max_ratio) <= 0 or self.ratio_grace < 0:
            raise ValueError("decode limits must be positive")


class Decoder(Protocol):
    @property
    def encoding(self) -> str: ...
    def feed(self, data: bytes) -> bytes: ...
    def end(self) -> None: ...


def parse_codings(header: str | None) -> list[str]:
    """The codings a Content-Encoding header lists, in the order they were applied, lower case, without identity.
    Raises ContentEncodingError(reason="unsupported") for one this module cannot decode."""
    codings = []
    for raw in (header or "").split(","):
        coding = raw.strip().lower()
        coding = _ALIASES.get(coding, coding)
        if coding in ("", IDENTITY):
            continue
        if coding not in SUPPORTED:
            raise ContentEncodingError(
                f"Content-Encoding {raw.strip()!r} is not one tokenpath decodes (it reads {', '.join(SUPPORTED)} "
                "and identity): its frames cannot be counted",
                reason="unsupported",
            )
        codings.append(coding)
    if len(codings) > MAX_CODINGS:
        raise ContentEncodingError(
            f"Content-Encoding {header!r} stacks {len(codings)} codings; at most {MAX_CODINGS} are decoded",
            reason="unsupported",
        )
    return codings


def accepts_coding(accept_encoding: str | None, coding: str) -> bool:
    """Whether a request's Accept-Encoding accepts `coding` (RFC 9110 §12.5.3): named, or `*`, with q > 0; an
    explicit entry wins over `*`."""
    named: float | None = None
    star: float | None = None
    for item in (accept_encoding or "").split(","):
        token, _, params = item.partition(";")
        name = _ALIASES.get(token.strip().lower(), token.strip().lower())
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0  # a malformed weight is not a yes
        if name == coding:
            named = q
        elif name == "*":
            star = q
    weight = named if named is not None else star
    return weight is not None and weight > 0


def decoder_for(
    header: str | None,
    *,
    max_output: int = MAX_OUTPUT,
    max_feed_output: int = MAX_FEED_OUTPUT,
    max_ratio: float = MAX_RATIO,
    ratio_grace: int = RATIO_GRACE,
) -> Decoder:
    """A decoder for a response whose Content-Encoding header is `header` (None or "" or identity: the body as
    it is)."""
    limits = DecodeLimits(max_feed_output, max_output, max_ratio, ratio_grace)
    codings = parse_codings(header)
    if not codings:
        return IdentityDecoder()
    layers = [StreamDecoder(coding, limits) for coding in reversed(codings)]
    return layers[0] if len(layers) == 1 else StackedDecoder(layers)


class IdentityDecoder:
    encoding = IDENTITY

    def feed(self, data: bytes) -> bytes:
        return data

    def end(self) -> None:
        pass


class StackedDecoder:
    """Several codings: the last one applied is undone first, its output fed to the next."""

    def __init__(self, layers: list[StreamDecoder]) -> None:
        self._layers = layers
        self.encoding = ", ".join(layer.encoding for layer in reversed(layers))

    def feed(self, data: bytes) -> bytes:
        for layer in self._layers:
            data = layer.feed(data)
        return data

    def end(self) -> None:
        for layer in self._layers:
            layer.end()


# --- one coding ----------------------------------------------------------------------------------------------


class _Codec(Protocol):
    """One decompressor behind one shape: `pull(data, max_length)` returns at most max_length bytes (brotli: a
    little more, one block) and keeps what it could not decode yet."""

    def pull(self, data: bytes, max_length: int) -> bytes: ...
    def has_pending_output(self) -> bool: ...  # output is waiting: pull(b"") gives more without new input
    def finished(self) -> bool: ...  # the stream's end marker was decoded
    def unused(self) -> bytes: ...  # bytes after the end marker


class _Zlib:
    def __init__(self, wbits: int) -> None:
        self._d = zlib.decompressobj(wbits)
        self._tail = b""

    def pull(self, data: bytes, max_length: int) -> bytes:
        out = self._d.decompress(self._tail + data if self._tail else data, max_length)
        self._tail = self._d.unconsumed_tail  # only when max_length stopped it
        return out

    def has_pending_output(self) -> bool:
        return bool(self._tail)

    def finished(self) -> bool:
        return self._d.eof

    def unused(self) -> bytes:
        return self._d.unused_data


class _Brotli:
    def __init__(self) -> None:
        self._d = brotli.Decompressor()
        self._held = b""  # input the decoder could not take while its output was full

    def pull(self, data: bytes, max_length: int) -> bytes:
        data = self._held + data if self._held else data
        self._held = b""
        if not self._d.can_accept_more_data():
            self._held = data
            data = b""
        return bytes(self._d.process(data, output_buffer_limit=max_length))

    def has_pending_output(self) -> bool:
        return bool(self._held) or not self._d.can_accept_more_data()

    def finished(self) -> bool:
        return bool(self._d.is_finished())

    def unused(self) -> bytes:
        return b""  # brotli refuses bytes after the end (an error from process), so none are ever left over


class _Zstd:
    def __init__(self) -> None:
        self._d = zstd.ZstdDecompressor()

    def pull(self, data: bytes, max_length: int) -> bytes:
        return self._d.decompress(data, max_length)

    def has_pending_output(self) -> bool:
        return not self._d.needs_input and not self._d.eof

    def finished(self) -> bool:
        return self._d.eof

    def unused(self) -> bytes:
        return self._d.unused_data


class _Deflate:
    """RFC 9110's deflate is the zlib format (RFC 1950); some servers send raw deflate (RFC 1951) and browsers read
    both. A zlib stream starts with a header whose first byte says deflate with a window <= 32 KiB and whose two
    bytes are a multiple of 31; anything else is read as raw."""

    def __init__(self) -> None:
        self._head = b""
        self._codec: _Zlib | None = None

    def pull(self, data: bytes, max_length: int) -> bytes:
        if self._codec is None:
            self._head += data
            if len(self._head) < 2:
                return b""
            b0, b1 = self._head[0], self._head[1]
            zlib_header = b0 & 0x0F == 8 and b0 >> 4 <= 7 and (b0 << 8 | b1) % 31 == 0
            self._codec = _Zlib(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
            data, self._head = self._head, b""
        return self._codec.pull(data, max_length)

    def has_pending_output(self) -> bool:
        return self._codec is not None and self._codec.has_pending_output()

    def finished(self) -> bool:
        return self._codec is not None and self._codec.finished()

    def unused(self) -> bytes:
        return self._codec.unused() if self._codec is not None else b""


_CODECS: dict[str, Callable[[], _Codec]] = {
    "gzip": lambda: _Zlib(16 + zlib.MAX_WBITS),
    "deflate": _Deflate,
    "br": _Brotli,
    "zstd": _Zstd,
}
# After a stream's end: gzip allows several members (RFC 1952 §2.2), zstd several frames (RFC 8878 §3.1); deflate
# and br have one stream, so bytes after it are an error.
_RESTARTS = frozenset({"gzip", "zstd"})
_ERRORS: tuple[type[Exception], ...] = (zlib.error, brotli.error, zstd.ZstdError)


class StreamDecoder:
    """One coding, decoded as bytes arrive, within DecodeLimits."""

    def __init__(self, encoding: str, limits: DecodeLimits | None = None) -> None:
        self.encoding = encoding
        self.limits = limits or DecodeLimits()
        self.bytes_in = 0
        self.bytes_out = 0
        self._codec = _CODECS[encoding]()
        self._first = b""  # the body's first bytes, for an error message that shows what came instead
        self._failed = False

    def feed(self, data: bytes) -> bytes:
        if self._failed:
            raise ContentEncodingError(f"{self.encoding} body: fed after an error", reason="corrupt")
        if not data:
            return b""
        if len(self._first) < _PREVIEW_BYTES:
            self._first += data[: _PREVIEW_BYTES - len(self._first)]
        self.bytes_in += len(data)
        allowed, bound = self._allowance()
        out: list[bytes] = []
        produced = 0
        pending = data
        try:
            for _ in range(MAX_STEPS_PER_FEED):
                if self._codec.finished():
                    pending = self._codec.unused() + pending
                    if not pending:
                        break
                    if self.encoding not in _RESTARTS:
                        raise self._error(f"{len(pending)} bytes after the end of the {self.encoding} stream")
                    self._codec = _CODECS[self.encoding]()  # the next gzip member or zstd frame
                chunk = self._codec.pull(pending, allowed - produced + 1)
                pending = b""
                produced += len(chunk)
                if produced > allowed:
                    raise self._too_large(bound)
                out.append(chunk)
                if not self._codec.has_pending_output() and not (self._codec.finished() and self._codec.unused()):
                    break
            else:
                raise self._error(f"the decompressor made no progress in {MAX_STEPS_PER_FEED} steps")
        except _ERRORS as exc:
            raise self._error(str(exc)) from None
        self.bytes_out += produced
        return out[0] if len(out) == 1 else b"".join(out)

    def end(self) -> None:
        """The body ended. A body that never started (zero bytes) is accepted, as browsers do."""
        if self._failed or self.bytes_in == 0 or self._codec.finished():
            return
        self._failed = True
        raise ContentEncodingError(
            f"the {self.encoding} body ended inside the compressed stream after {self.bytes_in} bytes "
            f"({self.bytes_out} decoded): truncated",
            reason="truncated",
        )

    def _allowance(self) -> tuple[int, str]:
        """The most this feed may decode, and the limit that sets it."""
        lim = self.limits
        by_ratio = max(lim.ratio_grace, int(lim.max_ratio * self.bytes_in)) - self.bytes_out
        options = [
            (lim.max_feed_output, f"{lim.max_feed_output} bytes decoded from one read"),
            (lim.max_output - self.bytes_out, f"{lim.max_output} bytes decoded in total"),
            (by_ratio, f"{lim.max_ratio:g} decoded bytes per compressed byte"),
        ]
        allowed, bound = min(options, key=lambda o: o[0])
        return max(allowed, 0), bound

    def _too_large(self, bound: str) -> ContentEncodingError:
        self._failed = True
        return ContentEncodingError(
            f"the {self.encoding} body decodes to more than {bound} (after {self.bytes_in} compressed bytes): "
            "refused as a decompression bomb",
            reason="too_large",
        )

    def _error(self, detail: str) -> ContentEncodingError:
        self._failed = True
        return ContentEncodingError(
            f"the body is not valid {self.encoding} ({detail}); it starts with {self._first!r}: "
            "is the Content-Encoding header right?",
            reason="corrupt",
        )
