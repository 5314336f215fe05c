"""The catalogue's compression variants (issue 24 §2): each writes its config line and only there; stock stays
stock; every variant carries the line the report shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpath.proxies import catalogue, lookup
from tokenpath.proxies.base import Endpoint, Site


def site(tmp_path: Path, proxy: str, variant: str = "stock") -> Site:
    return Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), tmp_path, lookup(proxy).variant(variant))


def config(tmp_path: Path, proxy: str, variant: str = "stock") -> str:
    return lookup(proxy).write_config(site(tmp_path, proxy, variant)).read_text()


CASES = [
    ("nginx", "gzip", ["gzip on;", "gzip_types text/event-stream;"], ["proxy_buffering"]),
    ("nginx", "gzip_buffering_off", ["gzip on;", "gzip_types text/event-stream;", "proxy_buffering off;"], []),
    ("haproxy", "compression", ["    compression algo gzip\n", "    compression type text/event-stream\n"],
     ["http-no-delay"]),
    ("caddy", "encode", ["  encode gzip zstd\n"], ["flush_interval"]),
    ("caddy-2.11", "encode", ["  encode gzip zstd\n"], []),
    ("envoy", "compressor", ["envoy.filters.http.compressor", "content_type: [text/event-stream]",
                             "envoy.extensions.compression.gzip.compressor.v3.Gzip"], ["timeout: 0s"]),
    ("apache2", "deflate", ["AddOutputFilterByType DEFLATE text/event-stream", "mod_deflate.so", "mod_filter.so"],
     ["flushpackets", "brotli", "BROTLI"]),
    ("apache2", "brotli", ["AddOutputFilterByType BROTLI_COMPRESS text/event-stream", "mod_brotli.so",
                           "mod_filter.so"], ["flushpackets", "deflate", "DEFLATE"]),
    ("envoy", "compressor_brotli", ["envoy.filters.http.compressor", "content_type: [text/event-stream]",
                                    "name: brotli", "envoy.extensions.compression.brotli.compressor.v3.Brotli"],
     ["timeout: 0s", "Gzip", "Zstd"]),
    ("envoy", "compressor_zstd", ["envoy.filters.http.compressor", "content_type: [text/event-stream]",
                                  "name: zstd", "envoy.extensions.compression.zstd.compressor.v3.Zstd"],
     ["timeout: 0s", "Gzip", "Brotli"]),
    ("starlette", "gzip", ["--gzip-minimum-size 500"], ["--compress-event-streams"]),
    ("starlette", "gzip_sse", ["--gzip-minimum-size 500", "--compress-event-streams"], []),
    ("express", "naive", ["--compression"], ["--flush"]),
    ("express", "flush", ["--compression", "--flush"], []),
]  # fmt: skip
COMPRESSION_WORDS = ("gzip", "compression", "encode", "compressor", "deflate", "DEFLATE", "brotli", "BROTLI", "zstd")


@pytest.mark.parametrize(("proxy", "variant", "present", "absent"), CASES)
def test_a_compression_variant_writes_its_lines(
    tmp_path: Path, proxy: str, variant: str, present: list[str], absent: list[str]
) -> None:
    text = config(tmp_path, proxy, variant)
    for line in present:
        assert line in text, line
    for word in absent:
        assert word not in text, word
    assert lookup(proxy).variant(variant).line  # the report shows it


@pytest.mark.parametrize("proxy", sorted({c[0] for c in CASES}))
def test_stock_and_the_other_variants_never_compress(tmp_path: Path, proxy: str) -> None:
    compressing = {v for p, v, _, _ in CASES if p == proxy}
    for variant in lookup(proxy).variants:
        if variant.name in compressing:
            continue
        text = config(tmp_path, proxy, variant.name).split("\n", 1)[1]  # past the comment line
        assert not [w for w in COMPRESSION_WORDS if w in text], (proxy, variant.name)


def test_the_nginx_gzip_line_the_report_shows_is_the_one_written(tmp_path: Path) -> None:
    line = lookup("nginx").variant("gzip").line
    text = config(tmp_path, "nginx", "gzip")
    assert all(part.strip() + ";" in text for part in line.split(";") if part.strip())


def test_every_non_stock_variant_of_a_compressing_proxy_has_a_line() -> None:
    for name in {c[0] for c in CASES}:
        proxy = catalogue()[name]
        assert all(v.line for v in proxy.variants if v.name != "stock"), name
