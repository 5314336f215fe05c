"""Content-Encoding decoding: every coding round-trips SSE events at every split; flushed per event, each event comes
out on the read that completes it; bombs of each kind, truncated bodies, garbage and a wrong header are refused."""

from __future__ import annotations

import functools
import gzip
import os
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path

import brotli  # type: ignore[import-untyped]
import pytest

from tests.wire.battery import CODINGS, encoded, splits
from tokenpath.errors import ContentEncodingError
from tokenpath.wire import contentcoding
from tokenpath.wire.contentcoding import (
    MAX_CODINGS,
    Decoder,
    IdentityDecoder,
    StackedDecoder,
    decoder_for,
    parse_codings,
    zstd,
)
from tokenpath.wire.sse import SSEParser

EVENTS = [
    b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n',
    b": ping\r\n\r\n",
    b'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":" world"}}]}\r\r',
    b"data: [DONE]\n\n",
]
PLAIN = b"".join(EVENTS)


def header(coding: str) -> str:
    return "deflate" if coding == "deflate-raw" else coding


def decode(coding: str, pieces: list[bytes]) -> bytes:
    decoder = decoder_for(header(coding))
    out = b"".join(decoder.feed(p) for p in pieces)
    decoder.end()
    return out


@pytest.mark.parametrize("flush", [False, True])
@pytest.mark.parametrize("coding", CODINGS)
def test_every_coding_round_trips_the_events_at_every_split(coding: str, flush: bool) -> None:
    body, _ = encoded(coding, EVENTS, flush)
    want = [f.raw for f in SSEParser().feed(PLAIN)]
    for pieces in splits(body):
        decoded = decode(coding, pieces)
        assert decoded == PLAIN
        assert [f.raw for f in SSEParser().feed(decoded)] == want


@pytest.mark.parametrize("coding", CODINGS)
def test_flushed_per_event_each_event_comes_out_on_the_read_that_completes_it(coding: str) -> None:
    body, ends = encoded(coding, EVENTS, flush=True)
    # One read per flushed event: each read decodes exactly its event.
    decoder = decoder_for(header(coding))
    starts = [0, *ends[:-1]]
    for event, start, end in zip(EVENTS, starts, ends, strict=True):
        assert decoder.feed(body[start:end]) == event
    assert decoder.feed(body[ends[-1] :]) == b""  # the end marker decodes to nothing
    decoder.end()
    # Byte by byte: once the read that completes an event's flush is fed, that event is out.
    decoder = decoder_for(header(coding))
    out = b""
    for i in range(len(body)):
        out += decoder.feed(body[i : i + 1])
        done = sum(1 for e in ends if e <= i + 1)
        assert out.startswith(PLAIN[: sum(map(len, EVENTS[:done]))])
        assert len(out) >= sum(map(len, EVENTS[:done]))


@pytest.mark.parametrize("coding", ["gzip", "deflate", "zstd"])
def test_without_a_flush_the_events_are_held_by_the_compressor(coding: str) -> None:
    """The control for the test above: the same reads without a per-event flush decode nothing until the end."""
    body, ends = encoded(coding, EVENTS, flush=False)
    decoder = decoder_for(coding)
    assert decoder.feed(body[: ends[-1]]) == b""
    assert decoder.feed(body[ends[-1] :]) == PLAIN


def test_stacked_codings_are_undone_in_reverse_order() -> None:
    stacked = brotli.compress(gzip.compress(PLAIN))  # gzip applied first, then br: "gzip, br"
    decoder = decoder_for("gzip, br")
    assert isinstance(decoder, StackedDecoder)
    assert decoder.encoding == "gzip, br"
    assert b"".join(decoder.feed(stacked[i : i + 1]) for i in range(len(stacked))) == PLAIN
    decoder.end()
    with pytest.raises(ContentEncodingError) as err:
        decoder_for("br, gzip").feed(stacked)
    assert err.value.reason == "corrupt"


@pytest.mark.parametrize("value", [None, "", "identity", " Identity ", "identity, identity"])
def test_no_coding_passes_the_body_through(value: str | None) -> None:
    decoder = decoder_for(value)
    assert isinstance(decoder, IdentityDecoder)
    assert decoder.feed(PLAIN) == PLAIN
    decoder.end()


def test_header_tokens_are_case_insensitive_with_the_x_gzip_alias() -> None:
    assert parse_codings("X-GZIP , Br,identity,zstd") == ["gzip", "br", "zstd"]
    assert decode("gzip", [gzip.compress(PLAIN)]) == PLAIN
    assert decoder_for("x-gzip").feed(gzip.compress(PLAIN)) == PLAIN


@pytest.mark.parametrize("value", ["compress", "gzip, lz4", "dcb", "chunked"])
def test_an_unknown_coding_is_named(value: str) -> None:
    with pytest.raises(ContentEncodingError, match="is not one tokenpath decodes") as err:
        decoder_for(value)
    assert err.value.reason == "unsupported"
    assert err.value.exit_code == 15


def test_too_many_stacked_codings_are_refused() -> None:
    decoder_for(", ".join(["gzip"] * MAX_CODINGS))
    with pytest.raises(ContentEncodingError, match="stacks") as err:
        decoder_for(", ".join(["gzip"] * (MAX_CODINGS + 1)))
    assert err.value.reason == "unsupported"


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("coding", CODINGS)
def test_a_truncated_body_is_refused_at_its_end(coding: str) -> None:
    body, _ = encoded(coding, EVENTS, flush=True)
    for cut in range(1, len(body)):
        decoder = decoder_for(header(coding))
        decoder.feed(body[:cut])
        with pytest.raises(ContentEncodingError, match="truncated") as err:
            decoder.end()
        assert err.value.reason == "truncated"


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_an_empty_body_is_not_truncated(coding: str) -> None:
    decoder = decoder_for(coding)
    assert decoder.feed(b"") == b""
    decoder.end()


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
@pytest.mark.parametrize("body", [b"\xff" * 64, bytes(range(256))], ids=["ff", "bytes"])
def test_garbage_is_corrupt(coding: str, body: bytes) -> None:
    decoder = decoder_for(coding)
    with pytest.raises(ContentEncodingError) as err:
        decoder.feed(body)
    assert err.value.reason == "corrupt"
    with pytest.raises(ContentEncodingError):  # a failed decoder stays failed
        decoder.feed(b"more")


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_a_plain_body_under_a_compressed_header_is_named_with_its_first_bytes(coding: str) -> None:
    with pytest.raises(ContentEncodingError, match=r"not valid .*starts with b'data: .*Content-Encoding") as err:
        decoder_for(coding).feed(PLAIN)
    assert err.value.reason == "corrupt"


@pytest.mark.parametrize("coding", ["deflate", "deflate-raw", "br"])
def test_bytes_after_a_single_stream_are_corrupt(coding: str) -> None:
    body, _ = encoded(coding, EVENTS, flush=False)
    decoder = decoder_for(header(coding))
    assert decoder.feed(body) == PLAIN
    with pytest.raises(ContentEncodingError, match="after the end") as err:
        decoder.feed(b"x")
    assert err.value.reason == "corrupt"


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_several_gzip_members_or_zstd_frames_are_one_body(coding: str) -> None:
    one, _ = encoded(coding, EVENTS[:2], flush=False)
    two, _ = encoded(coding, EVENTS[2:], flush=False)
    for pieces in splits(one + two):
        assert decode(coding, pieces) == PLAIN


# --- bombs: each limit, each coding, refused without holding the output ------------------------------------------

BOMB_BYTES = 16 << 20  # what the bomb would decode to
LIMIT = 1 << 20


def bomb(coding: str, size: int = BOMB_BYTES) -> bytes:
    """`size` zero bytes compressed, built a MiB at a time."""
    block = bytes(1 << 20)
    if coding == "br":
        br = brotli.Compressor(quality=0)
        return b"".join(br.process(block) for _ in range(size >> 20)) + bytes(br.finish())
    if coding == "zstd":
        zs = zstd.ZstdCompressor(level=1)
        return b"".join(zs.compress(block) for _ in range(size >> 20)) + zs.flush()
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS if coding == "gzip" else zlib.MAX_WBITS)
    return b"".join(z.compress(block) for _ in range(size >> 20)) + z.flush()


BOMB_CODINGS = ("br", "deflate", "gzip", "zstd")


@functools.cache
def cached_bomb(coding: str) -> bytes:
    return bomb(coding)


KINDS = {
    # limit given -> words in the error naming it
    "max_feed_output": "decoded from one read",
    "max_output": "decoded in total",
    "max_ratio": "per compressed byte",
}


def limits_for(kind: str) -> dict[str, float]:
    if kind == "max_ratio":
        return {"max_ratio": 50, "ratio_grace": 0}
    return {kind: LIMIT}


def feed_in_reads(decoder: Decoder, body: bytes, read: int = 16384) -> None:
    for i in range(0, len(body), read):  # reads as they come off a socket
        decoder.feed(body[i : i + read])


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("coding", BOMB_CODINGS)
def test_a_bomb_is_refused_by_each_limit_without_allocating_its_output(coding: str, kind: str) -> None:
    body = cached_bomb(coding)
    decoder = decoder_for(coding, **limits_for(kind))  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        with pytest.raises(ContentEncodingError, match=KINDS[kind]) as err:
            feed_in_reads(decoder, body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.reason == "too_large"
    # The most ever held is about one limit's worth (the limit, plus a block brotli may add), never the bomb.
    assert peak < 4 * LIMIT, f"peak {peak} bytes"


def test_each_limit_is_applied_alone() -> None:
    """The same input passes when the one limit that refused it is lifted: each limit is really in force."""
    small = bomb("gzip", 4 << 20)
    for kind in KINDS:
        with pytest.raises(ContentEncodingError, match=KINDS[kind]):
            decoder_for("gzip", **limits_for(kind)).feed(small)  # type: ignore[arg-type]
    assert len(decoder_for("gzip").feed(small)) == 4 << 20


def test_the_ratio_is_judged_only_past_its_grace() -> None:
    """A small input that decodes to many times its size (one flushed event) is not a bomb."""
    body = gzip.compress(b"." * 100_000)
    assert len(decoder_for("gzip", max_ratio=10, ratio_grace=200_000).feed(body)) == 100_000
    with pytest.raises(ContentEncodingError, match="per compressed byte"):
        decoder_for("gzip", max_ratio=10, ratio_grace=1000).feed(body)


def test_a_bomb_within_the_default_limits_keeps_the_process_small(tmp_path: Path) -> None:
    """The default limits in a fresh process: bombs that would decode to 256 MiB each are refused, and the
    process never grows by what they would decode to."""
    for coding in ("zstd", "br"):
        (tmp_path / coding).write_bytes(bomb(coding, 256 << 20))
    script = (
        "import sys\n"
        "from tokenpath.wire.contentcoding import decoder_for\n"
        "from tokenpath.errors import ContentEncodingError\n"
        "for path in sys.argv[1:]:\n"
        "    body, d = open(path, 'rb').read(), decoder_for(path.rsplit('/', 1)[1])\n"
        "    try:\n"
        "        for i in range(0, len(body), 65536): d.feed(body[i:i + 65536])\n"
        "        sys.exit('not refused')\n"
        "    except ContentEncodingError as e: assert e.reason == 'too_large', e\n"
        # VmHWM is this process's own peak (reset at exec); ru_maxrss would carry the forking worker's
        "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n"
    )
    paths = [str(tmp_path / c) for c in ("zstd", "br")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script, *paths], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    max_rss_kib = int(done.stdout.strip())
    assert max_rss_kib < 150 << 10, f"max RSS {max_rss_kib} KiB"  # MAX_FEED_OUTPUT (16 MiB) is the most held


def test_named_limits_are_what_the_decoder_uses_by_default() -> None:
    decoder = decoder_for("gzip")
    assert isinstance(decoder, contentcoding.StreamDecoder)
    assert decoder.limits == contentcoding.DecodeLimits(
        contentcoding.MAX_FEED_OUTPUT, contentcoding.MAX_OUTPUT, contentcoding.MAX_RATIO, contentcoding.RATIO_GRACE
    )


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("gzip", True),
        ("GZip", True),
        ("x-gzip", True),
        ("gzip, deflate, br, zstd", True),
        ("br;q=1.0, gzip;q=0.8", True),
        ("*", True),
        ("br, *;q=0.1", True),
        (None, False),
        ("", False),
        ("identity", False),
        ("br, zstd", False),
        ("gzip;q=0", False),
        ("gzip; q=0.000", False),
        ("*;q=1, gzip;q=0", False),  # an explicit entry wins over the wildcard
        ("gzip;q=bogus", False),
    ],
)
def test_accepts_coding_reads_the_weights(accept: str | None, expected: bool) -> None:
    assert contentcoding.accepts_coding(accept, "gzip") is expected


def test_every_layer_of_a_stack_is_bounded() -> None:
    inner = bomb("gzip", 8 << 20)  # "gzip, br": the br layer is small, the gzip inside it the bomb
    with pytest.raises(ContentEncodingError, match="gzip body decodes to more than") as err:
        decoder_for("gzip, br", max_output=LIMIT).feed(brotli.compress(inner))
    assert err.value.reason == "too_large"
