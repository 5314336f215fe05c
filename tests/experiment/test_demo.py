"""What `make demo` measures: every runnable catalogue entry and variant (Traefik and the compression variants
included), the controls, asked as a browser asks."""

from __future__ import annotations

from tokenpath.demo import quick_experiment
from tokenpath.probe.client import BROWSER_ACCEPT_ENCODING
from tokenpath.proxies import catalogue


def test_the_demo_measures_every_runnable_variant_and_the_controls_as_a_browser_asks() -> None:
    exp = quick_experiment()
    labels = {(p.proxy, p.variant) for p in exp.paths}
    for name in ("traefik", "nginx", "haproxy", "envoy"):
        proxy = catalogue()[name]
        if proxy.runnable:
            assert {(name, v.name) for v in proxy.variants} <= labels
    assert ("traefik", "compress") in labels
    assert ("nginx", "gzip") in labels
    assert {"pass", "cork", "buffer", "direct"} <= {p.proxy for p in exp.paths}
    assert not any(catalogue()[p.proxy].openai_only for p in exp.paths if p.proxy in catalogue())
    (cond,) = exp.conditions
    assert cond.accept_encoding == BROWSER_ACCEPT_ENCODING  # so the compression variants compress
    assert (cond.interval_ms, cond.frame_bytes) == (50.0, 60)
