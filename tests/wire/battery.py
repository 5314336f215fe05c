"""The splits battery: every parser and shell in tokenpath is fed the same bytes at every split point and one byte at
a time, and what comes out must not depend on how the bytes were cut."""

from __future__ import annotations

from collections.abc import Callable


def splits(raw: bytes) -> list[list[bytes]]:
    """Every two-piece split, and one byte at a time."""
    out = [[raw[:i], raw[i:]] for i in range(len(raw) + 1)]
    out.append([raw[i : i + 1] for i in range(len(raw))])
    return out


# Content codings (wire/contentcoding.py): a body the same events make under each one, so the decoder and every
# reader after it can be fed it at every split. "deflate-raw" is the raw deflate some servers send as "deflate".
CODINGS = ("gzip", "deflate", "deflate-raw", "br", "zstd")


def encoded(coding: str, parts: list[bytes], flush: bool) -> tuple[bytes, list[int]]:
    """`parts` compressed as one body, and the offset in it where each part's compressed bytes end. With `flush`
    the compressor is flushed after every part (Z_SYNC_FLUSH, brotli flush, zstd FLUSH_BLOCK), as a streaming
    server does per event; without it the offsets are wherever the compressor happened to emit."""
    import zlib

    import brotli  # type: ignore[import-untyped]

    from tokenpath.wire.contentcoding import zstd

    compress: Callable[[bytes], bytes]
    sync: Callable[[], bytes]
    finish: Callable[[], bytes]
    if coding == "br":
        br = brotli.Compressor(quality=5)
        compress, sync, finish = br.process, br.flush, br.finish
    elif coding == "zstd":
        zs = zstd.ZstdCompressor()
        compress = zs.compress
        sync = lambda: zs.compress(b"", zs.FLUSH_BLOCK)  # noqa: E731
        finish = lambda: zs.flush(zs.FLUSH_FRAME)  # noqa: E731
    else:
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "deflate-raw": -zlib.MAX_WBITS}[coding]
        z = zlib.compressobj(6, zlib.DEFLATED, wbits)
        compress, finish = z.compress, z.flush
        sync = lambda: z.flush(zlib.Z_SYNC_FLUSH)  # noqa: E731
    body = bytearray()
    ends = []
    for part in parts:
        body += compress(part)
        if flush:
            body += sync()
        ends.append(len(body))
    body += finish()
    return bytes(body), ends
