"""`tokenpath load`: TTFT added by a path at increasing concurrency, side by side with the direct path.

For each level and run, every target is loaded in turn (direct first) with the same closed-loop workload; each
stream is joined to the stub's write log (added TTFT = client arrival of the first content frame - the stub's write
of it) and checked byte for byte. Percentiles come from HDR histograms merged over runs and client processes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import ipaddress
import itertools
import math
import os
import resource
import signal
from array import array
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hdrh.histogram import HdrHistogram
from rich.console import Console

from tokenpath.audit import StreamLog, added_ns
from tokenpath.errors import PeerError, ServiceError, UsageError
from tokenpath.load.cluster import (
    ClusterSpec,
    RayClients,
    RunClock,
    cpus_per_client_node,
    local_cluster,
    parse_cluster,
)
from tokenpath.load.contention import Contention, schedule_missed
from tokenpath.load.framedelay import frame_delays_ns
from tokenpath.load.integrity import BeforeFirstToken
from tokenpath.load.sampler import HostSampler, ResourceSampler, listening_pid
from tokenpath.load.stubinfo import check_serves, fetch_pacing, served_by_a_stub, with_stub_pacing
from tokenpath.load.worker import (
    JWTMinter,
    StreamResult,
    WorkerReport,
    Workload,
    ignore_stop_signals,
    run_worker,
    stream_timeout_s,
)
from tokenpath.probe.h3figures import parse_h3_window
from tokenpath.probe.transport import TLSOptions, parse_target
from tokenpath.progress import escaped, progress_bar, styled
from tokenpath.proxies import ProxyError, RunningProxy, lookup, pinned
from tokenpath.proxies.base import STOCK, Endpoint, Proxy, Site, Variant, await_ready, free_port, new_workdir, spawn
from tokenpath.proxies.catalogue import parse_ref
from tokenpath.proxies.custom import CustomProxy, RequestOptions
from tokenpath.results import model
from tokenpath.results.model import (
    FlowControlStalls,
    LoadResults,
    LoadRow,
    MedianAndTail,
    Percentiles,
    Provenance,
    ResultWarning,
    TargetInfo,
    TargetSkip,
    WebSocketLoad,
    prepare_out_dir,
)
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.stats import percentile
from tokenpath.stopsignals import StopSignals
from tokenpath.stub.config import MAX_WORKERS, Pacing, StubConfig
from tokenpath.stub.control import fetch_audit
from tokenpath.stub.formats import check_start
from tokenpath.wire.acceptencoding import IDENTITY, expand_accept_encoding
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.carrier import SSE, TRANSPORTS, WEBSOCKET
from tokenpath.wire.h2client import parse_h2_window
from tokenpath.wire.httpversion import HttpVersion
from tokenpath.wire.request import parse_header_arg, refuse_second_credential

PROMPT = " ".join(f"word{i}" for i in range(400))  # ~400 prompt tokens, as in the first article
HIST_MAX_US = 600_000_000  # 10 minutes: nothing a stream waits is longer
HIST_DIGITS = 3  # significant digits: 0.1 % resolution, i.e. 1 us at 1 ms and 0.1 ms at 100 ms
AUDIT_TIMEOUT_S = 60.0  # one bulk audit of up to AUDIT_BATCH streams from a stub that may be busy

if TYPE_CHECKING:  # the WebSocket client is imported by a worker that carries a stream over it
    from tokenpath.load.wsconn import WsStreamFigures


def new_histogram() -> HdrHistogram:
    return HdrHistogram(1, HIST_MAX_US, HIST_DIGITS)


STUB_OFFSET_ENV = "TOKENPATH_TEST_STUB_CLOCK_OFFSET_MS"  # test only: the stub reports times this far ahead
AUDIT_BATCH = 400  # stream ids per audit request
LAG_WARN_MS = 5.0  # client event-loop lag p99 above this: it measures its own queueing
CPU_WARN = 0.9  # a client process busier than this fraction of a core is saturated
AUDIT_FAIL_WARN = 0.01  # more than 1 % of streams off schedule: the stub is late (load/contention.py says why)
FLOOR_RATIO_WARN = 0.5  # direct p99 above half of a target's p50: the floor cannot resolve it
FD_SLACK = 64  # files a client process holds besides its streams: the loop, pipes, the audit connection, libraries
FD_CEILING = 1 << 20  # what to ask for when the hard limit is unlimited
# Open loop: the most streams per second one client process is asked to start. Each start is a new connection, a
# request written and a response head parsed on one event loop, some 100-200 µs of CPU with the stream's reads
# besides (bench/RESULTS.md: ~8.8 µs per frame read): past ~10,000 a second the schedule runs ahead of what the
# process can start and the backlog only grows (at 1e6/s, or inf, its tasks piled up by ~150 MB a second).
MAX_RATE_PER_CLIENT = 10_000.0
# A level's warm-up or measured window: every stream result of a run is held until the run is joined to the stub's
# audit (500 streams of ~2 s for an hour: ~900,000 of them), so a level is bounded; a soak test is many runs.
MAX_DURATION_S = 3600.0
MAX_LEVEL = 1_000_000  # open streams in one level: a million sockets is past any one host's and this client's reach
MAX_RUNS = 1000  # per level: 1000 x (warmup + duration) is days already (experiment/spec.py MAX_RUNS alike)
FORWARD_EVERY_S = 0.5  # how often a stopping parent repeats its stop to client processes that have not ended


@dataclass(frozen=True, slots=True)
class LoadConfig:
    targets: tuple[str, ...]
    levels: tuple[int, ...] = (50, 200, 500)
    warmup_s: float = 2.0
    duration_s: float = 10.0
    runs: int = 3
    client_workers: int = 0  # 0: what the machine can spare (spare_client_workers)
    stub_workers: int = 1
    # The stub's pacing (its flags, or a --stub-url stub's own): everything stub/config.py's Pacing says of a stream.
    pacing: Pacing = field(default_factory=Pacing)
    model: str = "tokenpath-stub"
    rates: tuple[float, ...] = ()  # open loop: streams per second per level (replaces `levels`)
    max_in_flight: int = 2000  # open loop: streams in flight before new ones wait (their wait is counted)
    target_url: str | None = None  # an external target, with the stub it talks to at stub_url
    stub_url: str | None = None
    target_headers: tuple[tuple[str, str], ...] = ()  # sent to the external target with every stream
    target_api_key: str | None = field(default=None, repr=False)  # its Bearer token (read from an env var)
    target_jwt: JWTMinter | None = field(default=None, repr=False)  # or a fresh JWT per stream
    custom: tuple[tuple[str, str, str], ...] = ()  # (label, option, value): what a LABEL=COMMAND target needs
    cluster: str | None = None  # Ray: auto, HOST:PORT, ray://HOST:PORT or local:N (load/cluster.py)
    stub_node: str | None = None  # with a cluster: the node (its address) the stub runs on
    pacing_given: tuple[str, ...] = ()  # the Pacing fields the user set (--stub-url: checked against the stub's)
    target_tls: TLSOptions = field(default_factory=TLSOptions)  # an https --target: --cacert / --insecure
    api: Api = Api.OPENAI  # the streaming format of every stream (--api)
    accept_encoding: str | None = None  # sent with every stream (--accept-encoding; `browser` expanded)
    # The client's HTTP version (issue 25): HTTP/2 by ALPN over TLS, h2c with prior knowledge over cleartext, with
    # these flow-control windows (wire/h2client.parse_h2_window) and streams per connection.
    http_version: HttpVersion = HttpVersion.HTTP11
    h2_window: str = "default"
    streams_per_connection: int = 1
    # How each stream is carried (wire/carrier.py): `websocket` is the format's WebSocket mode, an upgrade per stream
    # (load/wsconn.py), over HTTP/1.1 only.
    transport: str = SSE
    # HTTP/3 (load/h3conn.py): one QUIC connection per stream to an https `target_url`, with these initial receive
    # windows (probe/h3figures.parse_h3_window); the direct floor (the stub serves no QUIC) over HTTP/1.1.
    h3_window: str = "default"

    @property
    def before_first_token(self) -> BeforeFirstToken:
        """What the integrity check must expect besides the tokens."""
        p = self.pacing
        return BeforeFirstToken(p.reasoning_tokens, p.first_event_bytes, bool(p.heartbeat_ms))

    @property
    def open_loop(self) -> bool:
        return bool(self.rates)

    @property
    def level_values(self) -> tuple[float, ...]:
        return self.rates or tuple(float(c) for c in self.levels)

    def __post_init__(self) -> None:
        self._check_numbers()
        for name in ("target_url", "stub_url"):
            refuse_userinfo(getattr(self, name), f"`{name}`")
        if self.accept_encoding is not None:
            object.__setattr__(self, "accept_encoding", expand_accept_encoding(self.accept_encoding))
        if self.client_workers == 0 and self.cluster is None:  # on a cluster: one per client node (RayClients)
            object.__setattr__(self, "client_workers", spare_client_workers(self.stub_workers))
        if self.stub_node is not None and self.cluster is None:
            raise UsageError("`stub_node` needs `cluster`")
        if self.rates and min(self.rates) <= 0:
            raise UsageError("`rates` needs levels > 0 streams per second, e.g. 20,50")
        if (self.target_url is None) != (self.stub_url is None):
            raise UsageError("`target_url` needs `stub_url` (the stub it talks to, whose audit the join reads)")
        if self.stub_url is not None and self.cluster is None and not _on_this_host(self.stub_url):
            raise UsageError(
                f"`stub_url` {self.stub_url} is not on this host: added TTFT joins the stub's write times to the "
                "client's arrival times, which needs one clock; run the stub here (loopback), or measure across "
                "hosts with a clock estimate"
            )
        if not self.levels or min(self.levels) < 1:
            raise UsageError("`levels` needs levels >= 1, e.g. 50,200,500")
        if max(self.levels) > MAX_LEVEL:  # refused by the open-file limit before, in a 21-digit number of files
            raise UsageError(
                f"`levels`: at most {MAX_LEVEL:,} open streams a level (spread them over `client_workers`)"
            )
        if self.runs < 1 or self.client_workers < 0 or self.stub_workers < 1:
            raise UsageError(
                "`runs` and `stub_workers` must be >= 1, `client_workers` >= 0 (0: what the machine spares)"
            )
        if self.target_api_key or self.target_jwt:  # its key's header and a --header of that name: two credentials
            refuse_second_credential(self.target_headers, (self.api,))
        if self.runs > MAX_RUNS:  # its plan is built whole: --runs 1000000000 took 24 GB before a stream ran
            raise UsageError(f"`runs` {self.runs}: at most {MAX_RUNS} per level (each run lasts warmup + duration)")
        if self.stub_workers > MAX_WORKERS:  # the stub's own rule, before it starts rather than after (exit 22)
            raise UsageError(f"`stub_workers` {self.stub_workers}: at most {MAX_WORKERS}")
        if self.duration_s <= 0 or self.warmup_s < 0:
            raise UsageError("`duration_s` must be > 0 and `warmup_s` >= 0")
        if self.streams_per_connection < 1:
            raise UsageError("`streams_per_connection` must be >= 1 (1: one connection per stream)")
        h2 = self.http_version is HttpVersion.HTTP2
        if not h2 and (self.streams_per_connection != 1 or self.h2_window != "default"):
            raise UsageError("`streams_per_connection` and `h2_window` are HTTP/2's: add `http2`")
        if h2:
            object.__setattr__(self, "h2_window", str(parse_h2_window(self.h2_window)))  # UsageError if not one
        self._check_http3()
        self._check_transport()
        # The stub's own rules, before it starts: ranges, a keep-alive in a format that has none (Bedrock, Ollama),
        # a first event too small for its frame.
        check_start(StubConfig.paced(self.pacing, model=self.model, api=self.api.value))

    def _check_numbers(self) -> None:
        """Numbers a run cannot mean: not finite (a NaN passes every `<=` check and ran 0 streams, or hung the
        stub), past their bound, or given twice (two rows of the same level, two of one target)."""
        for name in ("warmup_s", "duration_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value > MAX_DURATION_S:
                raise UsageError(f"`{name}` must be a number of seconds up to {MAX_DURATION_S:g}, not {value}")
        for f in dataclasses.fields(self.pacing):
            value = getattr(self.pacing, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise UsageError(f"`{f.name}` must be a finite number, not {value}")
        if any(not math.isfinite(r) for r in self.rates):
            raise UsageError("`rates` must be finite streams per second, e.g. 20,50")
        if self.max_in_flight < 1:
            raise UsageError("`max_in_flight` must be >= 1")
        clients = max(1, self.client_workers)
        if self.rates and max(self.rates) > MAX_RATE_PER_CLIENT * clients:
            raise UsageError(
                f"`rates` {max(self.rates):g} streams per second: one client process starts at most "
                f"{MAX_RATE_PER_CLIENT:g} a second ({clients} asked for): add `client_workers` or lower the rate"
            )
        for name, values in (("levels", self.levels), ("rates", self.rates)):
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise UsageError(f"`{name}` has {', '.join(f'{v:g}' for v in twice)} more than once")
        labels = [t.partition("=")[0] if "{listen" in t else t for t in self.targets if t != "direct"]
        twice_t = sorted({t for t in labels if labels.count(t) > 1})
        if twice_t:
            raise UsageError(f"`targets` has {', '.join(twice_t)} more than once (each is started and measured once)")

    def _check_http3(self) -> None:
        h3 = self.http_version is HttpVersion.HTTP3
        if not h3:
            if self.h3_window != "default":
                raise UsageError("`h3_window` is HTTP/3's: add `http3`")
            return
        object.__setattr__(self, "h3_window", str(parse_h3_window(self.h3_window)))  # UsageError if not one
        if self.target_url is None or not self.target_url.startswith("https:"):
            raise UsageError(
                "`http3` needs an https `target_url` (QUIC is always TLS; the stub and the catalogue's targets listen "
                "in clear text): --target https://... --stub-url ..."
            )
        if any(t != "direct" for t in self.targets):
            raise UsageError(
                "`http3` measures the https `target_url` only: the catalogue's `targets` listen in clear text"
            )
        if self.cluster is not None:
            raise UsageError("`http3` is not run on a `cluster` yet (its client workers' UDP path is untried)")

    def _check_transport(self) -> None:
        if self.transport not in TRANSPORTS:
            raise UsageError(f"`transport` {self.transport!r}: choose {' or '.join(TRANSPORTS)}")
        if self.transport != WEBSOCKET:
            if SPECS[self.api].websocket_only:  # refused here, before a stub, a proxy or a worker is started
                raise UsageError(
                    f"`transport` {self.transport}: the {self.api.value} API is WebSocket only (no HTTP stream): "
                    "pass --transport websocket"
                )
            return
        if self.http_version is not HttpVersion.HTTP11:
            raise UsageError(
                f"`transport` websocket is an HTTP/1.1 upgrade: it does not run over HTTP/{self.http_version}"
            )
        if not SPECS[self.api].websocket:
            modes = ", ".join(a.value for a, spec in SPECS.items() if spec.websocket)
            api = self.api.value
            raise UsageError(f"`transport` websocket: the {api} API has no WebSocket mode (`api` {modes} has)")


def refuse_userinfo(url: str | None, name: str) -> None:
    """A URL with user:password@ is refused, its text never shown (it would be stored in results.json and printed):
    the load client never sends a URL's userinfo as Basic auth, so it would only leak. The flags that do carry
    credentials are named."""
    if url is None:
        return
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return  # parse_target says what is wrong with it
    if "@" in netloc:
        raise UsageError(
            f"{name} carries credentials (user:password@), which load never sends and would store in results.json: "
            "remove them and pass --header 'Authorization: ...', --api-key-env VAR or --jwt-secret-env VAR"
        )


def _on_this_host(url: str) -> bool:
    """Loopback only: a stub elsewhere reads another host's CLOCK_MONOTONIC."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def spare_client_workers(stub_workers: int, cpus: int | None = None) -> int:
    """Client processes by default: half the cores the stub does not take, the other half left to the target
    (whose CPU is what the run measures). One on a 2-core machine, three on 8 cores with one stub worker."""
    cores = cpus if cpus is not None else len(os.sched_getaffinity(0))
    return max(1, (cores - stub_workers) // 2)


@dataclass
class Cell:
    """One target at one level, merged over runs."""

    target: str
    level: float  # open streams (closed loop) or streams per second (open loop)
    hist: HdrHistogram = field(default_factory=new_histogram)
    corrected: HdrHistogram = field(default_factory=new_histogram)  # + dispatch lag
    dispatch_lag: HdrHistogram = field(default_factory=new_histogram)
    streams: int = 0
    errors: int = 0
    audit_failed: int = 0
    unjoined: int = 0  # streams the stub's audit could not name: neither their id nor their chunks' id reached it
    foreign: int = 0  # of those, streams another stub served (a stub's chunk id, unknown to --stub-url's audit)
    lost: int = 0
    out_of_order: int = 0
    reserialized: int = 0
    run_added_ms: list[MedianAndTail] = field(default_factory=list)  # p50/p99 of each run: the spread
    cores: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    lag_p99_ms: float = 0.0
    client_cpu: float = 0.0
    error_samples: list[str] = field(default_factory=list)
    stopped: str | None = None  # a worker gave up on this level: nearly every stream failed one way
    clocks: list[list[RunClock]] = field(default_factory=list)  # --cluster: each run's client clocks
    stub_cores: list[float] = field(default_factory=list)  # per run: the stub's CPU, the host's steal and run queue
    encodings: Counter[str] = field(default_factory=Counter)  # Content-Encoding of the streams that completed
    frame_delay: HdrHistogram = field(default_factory=new_histogram)  # every frame after the first content's
    first_token: HdrHistogram = field(default_factory=new_histogram)  # streams whose stub sent reasoning first
    steal: list[float] = field(default_factory=list)
    run_queue: list[float] = field(default_factory=list)
    # HTTP/2: per stream its stall time (ms) and stalls; DATA frames and the reads that carried them, summed.
    stall_ms: list[float] = field(default_factory=list)
    stalls: int = 0
    stalled: int = 0  # streams with at least one stall
    data_frames: int = 0
    data_reads: int = 0
    connections: int = 0  # the most connections one run opened
    peer_limit: int | None = None  # the peer's SETTINGS_MAX_CONCURRENT_STREAMS, when below what was asked
    # How every stream started in the measured window ended (wire/ending.py): a cut one is an error above, never
    # in the figures; a stream that never began (no connection, a timeout of ours) has no end.
    ends: Counter[str] = field(default_factory=Counter)
    # Over WebSocket: every stream's upgrade (its time when upgraded; the status that came instead when not), the
    # messages and the reads that completed them, the peers' closes before the final event by code.
    upgrade_ms: list[float] = field(default_factory=list)
    not_upgraded: Counter[int] = field(default_factory=Counter)
    messages: int = 0
    message_reads: int = 0
    ws_closes: Counter[int] = field(default_factory=Counter)
    # Over HTTP/3: the version this cell's streams spoke (the direct floor's is HTTP/1.1), each stream's handshake.
    http_version: HttpVersion = HttpVersion.HTTP11
    handshake_ms: list[float] = field(default_factory=list)

    def contention(self, stub_workers: int, cores: int, direct_missed_share: float | None) -> Contention:
        def mean(values: list[float]) -> float | None:
            return sum(values) / len(values) if values else None

        return Contention(
            mean(self.stub_cores), stub_workers, mean(self.steal), mean(self.run_queue), cores, direct_missed_share
        )

    def pct_ms(self, p: float, hist: HdrHistogram | None = None) -> float | None:
        h = self.hist if hist is None else hist
        return h.get_value_at_percentile(p) / 1000 if h.get_total_count() else None


class LoadRunner:
    def __init__(self, cfg: LoadConfig, out_dir: Path, console: Console) -> None:
        self.cfg = cfg
        self.out_dir = out_dir
        self.console = console
        self.provenance = Provenance.now("load")
        self.targets: dict[str, TargetInfo] = {}
        self.skipped: list[TargetSkip] = []
        self.interrupted = False
        self.cluster: RayClients | None = None
        self.cluster_info: dict[str, Any] | None = None
        self.bind = "127.0.0.1"  # where the stub and the targets listen: loopback unless a cluster must reach them
        self.stub_pid: int | None = None  # sampled beside each run: its CPU tells capacity from host contention
        self.cores = os.cpu_count() or 1
        self.signals = StopSignals()

    def run(self) -> LoadResults:
        prepare_out_dir(self.out_dir)
        with self.signals:
            return self._run_anywhere()

    def _run_anywhere(self) -> LoadResults:
        cfg = self.cfg
        if cfg.cluster is None:
            return self._run()
        spec = parse_cluster(cfg.cluster)
        if spec.local_nodes:
            cpus = cpus_per_client_node(cfg.client_workers or None, spec.local_nodes)
            with local_cluster(spec.local_nodes, cpus) as address:
                return self._run_on(address, spec)
        assert spec.address is not None
        return self._run_on(spec.address, spec)

    def _run_on(self, address: str, spec: ClusterSpec) -> LoadResults:
        self.console.print(f"cluster: joining {address}", markup=False)
        clients = RayClients(address, self.cfg.client_workers or None)
        self.cluster, self.bind = clients, clients.driver_ip
        stub_at = self.cfg.stub_node or clients.driver_ip
        self.console.print(
            f"cluster: {len(clients.nodes)} nodes; client workers on {', '.join(clients.ips)}; "
            f"stub on {stub_at}, targets on {clients.driver_ip}",
            markup=False,
        )
        self.cluster_info = {
            "address": address,
            "local_nodes": spec.local_nodes,
            "driver": clients.driver_ip,
            "nodes": clients.nodes,
            "client_workers": clients.ips,
            "stub_node": self.cfg.stub_node or clients.driver_ip,
        }
        try:
            return self._run()
        finally:
            clients.close()

    def _stub_argv(self) -> list[str]:
        """The stub load starts: its workers and model, and the pacing as its flags (Pacing.to_argv)."""
        cfg = self.cfg
        offset = ["--clock-offset-ms", os.environ[STUB_OFFSET_ENV]] if os.environ.get(STUB_OFFSET_ENV) else []
        workers = ["--workers", str(cfg.stub_workers), "--model", cfg.model]
        return tokenpath_argv("stub", "--port", "0", *workers, *offset, *cfg.pacing.to_argv())

    def _run(self) -> LoadResults:
        cfg = self.cfg
        self._install_releases()
        if self.cluster is None:
            per_process = cfg.max_in_flight if cfg.open_loop else max(cfg.levels)
            ensure_fd_limit(-(-per_process // cfg.client_workers))
        cells: dict[tuple[float, str], Cell] = {}
        failure: ServiceError | None = None
        with contextlib.ExitStack() as stack:
            try:
                stub_url, targets, keys, proxies = self._start_all(stack)
                failure = self._plan(cells, stub_url, targets, keys, proxies)
            except KeyboardInterrupt:  # SIGINT/SIGTERM (StopSignals, or a client's report): keep what was measured
                self.signals.fired = True
                self.interrupted = True
            nodes = {"cluster_nodes": self.cluster_info} if self.cluster_info else {}
            results = LoadResults(
                provenance=self.provenance,
                targets=dict(self.targets),
                config={**_config_json(self.cfg), **nodes},  # self.cfg: a --stub-url stub's own pacing, once read
                skipped=tuple(self.skipped),
                levels=tuple(self._summarise(cells)),
                interrupted=self.interrupted,
            )
            model.write(results, self.out_dir)
        if failure is not None:
            raise ServiceError(f"{failure} (the rows measured before it are in {self.out_dir / 'results.json'})")
        return results

    def _start_all(
        self, stack: contextlib.ExitStack
    ) -> tuple[str, dict[str, tuple[str, int | None]], dict[str, str | None], dict[str, RunningProxy]]:
        """The stub (or the user's) and every target, each stopped by `stack`."""
        cfg = self.cfg
        if cfg.stub_url is not None:
            stub_url = cfg.stub_url  # the user's stub: its pacing is theirs, read from it
            self.cfg = cfg = with_stub_pacing(cfg, stub_url, fetch_pacing(stub_url))
            check_serves(stub_url, cfg.api.value)
            if self.cluster is None:
                self.stub_pid = listening_pid(parse_target(stub_url).port)
        elif self.cluster is not None and cfg.stub_node is not None:
            with self.signals.held():  # its actor's handle kept (RayClients.close stops it) before a stop lands
                self.cluster.spawn_stub(cfg.stub_node, self._stub_argv())
            stub_url = self.cluster.stub_url()
        else:
            stub = ServiceProcess([*self._stub_argv(), "--host", self.bind], "stub")
            stack.callback(stub.stop)
            with self.signals.held(until=lambda: stub.pid is not None):  # not inside Popen: stub.stop reaches it
                stub_url = stub.start()
            self.stub_pid = stub.pid
        targets: dict[str, tuple[str, int | None]] = {"direct": (stub_url, None)}
        keys: dict[str, str | None] = {}
        proxies: dict[str, RunningProxy] = {}
        if cfg.target_url is not None:
            targets["target"] = (cfg.target_url, None)
        for name in cfg.targets:
            if name == "direct":
                continue
            running = self._start(name, stub_url, stack)
            if running is not None:
                label = running.proxy.name if "{listen" in name else name  # LABEL=COMMAND: shown as LABEL
                targets[label] = (running.url, running.process.pid if running.process else None)
                keys[label] = running.proxy.api_key(running.site)
                proxies[label] = running
        return stub_url, targets, keys, proxies

    def _plan(
        self,
        cells: dict[tuple[float, str], Cell],
        stub_url: str,
        targets: dict[str, tuple[str, int | None]],
        keys: dict[str, str | None],
        proxies: dict[str, RunningProxy],
    ) -> ServiceError | None:
        """Every level, run and target in turn, into `cells`; a service that failed mid-run, if one did (the rows
        before it are kept). KeyboardInterrupt (a stop signal) goes to the caller, which keeps them too."""
        cfg = self.cfg
        plan = list(itertools.product(cfg.level_values, range(cfg.runs), targets))
        progress = progress_bar(self.console)
        if not self.console.is_terminal:  # no bar to watch: say up front how long the run should take
            step_s = cfg.warmup_s + cfg.duration_s
            self.console.print(
                f"load: {len(plan)} steps ({len(cfg.level_values)} levels x {cfg.runs} runs x "
                f"{len(targets)} targets) of about {step_s:g} s each, expected about "
                f"{len(plan) * step_s:.0f} s in all",
                markup=False,
                highlight=False,
            )
        failure: ServiceError | None = None
        try:
            with progress:
                task = progress.add_task("load", total=len(plan))
                for level, run, name in plan:
                    unit = "streams/s" if cfg.open_loop else "streams"
                    progress.update(task, description=f"{level:g} {unit}, run {run + 1}, {name}")
                    url, pid = targets[name]
                    cell = cells.setdefault((level, name), Cell(name, level))
                    if cell.stopped is None:  # a level that failed one way is not run again
                        stopped = self._measure(
                            cell, url, pid, stub_url, keys.get(name), name == "target", proxies.get(name)
                        )
                        if stopped:
                            self.console.print(styled(f"{name} @ {level:g}: {stopped}", "yellow"))
                    progress.advance(task)
        except ServiceError as exc:  # e.g. a cluster node died mid-level: keep what was measured, then say so
            self.interrupted, failure = True, exc
        return failure

    def _install_releases(self) -> None:
        """Every NAME@VERSION[:VARIANT] target's release installed (or found cached) before the stub starts: a
        version the registry lacks is one ProxyError line and nothing ran (proxies/pinned.py)."""
        for name in self.cfg.targets:
            if "{listen" in name or "@" not in name:
                continue
            try:
                proxy = lookup(parse_ref(name).proxy)
            except ProxyError as exc:
                raise UsageError(str(exc)) from None
            if pinned.prepare(proxy) is not None:
                self.console.print(f"preflight: {name}: {proxy.package} installed", markup=False, highlight=False)

    def _start(self, name: str, stub_url: str, stack: contextlib.ExitStack) -> RunningProxy | None:
        """`name` is a catalogue proxy, optionally with a variant (`haproxy:http_no_delay`), or `LABEL=COMMAND` with
        {listen}/{upstream} placeholders (any proxy you can start from a command line)."""
        proxy_name, _, variant_name = name.partition(":")
        proxy: Proxy
        try:
            if "{listen" in name:
                label, sep, command = name.partition("=")
                if not sep or " " in label or "{" in label:
                    raise ProxyError(f"`targets` {name!r}: a command target is LABEL=COMMAND")
                options = RequestOptions.parse(label, self._custom_options(label))
                proxy, proxy_name, variant = CustomProxy(label, command, options=options), label, STOCK
            else:
                proxy = lookup(proxy_name)
                variant = proxy.variant(variant_name or "stock")
        except ProxyError as exc:
            raise UsageError(str(exc)) from None
        reason = proxy.missing_reason() or self._http_unsupported(proxy, variant)
        if reason is None:
            up = urlsplit(stub_url)
            assert up.hostname is not None
            assert up.port is not None
            site = Site(
                Endpoint(self.bind, free_port(self.bind)),
                Endpoint(up.hostname, up.port),
                new_workdir(proxy_name),
                variant,
            )
            try:
                running = self._launch(proxy, site, stack)
            except ProxyError as exc:
                reason = f"failed to start: {exc}"
            else:
                label = proxy_name if "{listen" in name else name
                self.targets[label] = TargetInfo(proxy.version(), variant.name, running.effective)
                return running
        self.console.print(f"{styled(f'skipping {name}:', 'yellow')} {escaped(reason)}")
        self.skipped.append(TargetSkip(name, reason))
        return None

    def _launch(self, proxy: Proxy, site: Site, stack: contextlib.ExitStack) -> RunningProxy:
        """The proxy spawned with its stop on `stack` before a stop signal can land (held), then awaited, which a
        stop may cut; one that fails to start is stopped at once, not at the end of the run."""
        stop = stack.enter_context(contextlib.ExitStack())
        with self.signals.held():
            running = spawn(proxy, site)
            stop.callback(running.stop)
        try:
            await_ready(running)
        except ProxyError:
            stop.close()
            raise
        return running

    def _http_unsupported(self, proxy: Proxy, variant: Variant) -> str | None:
        """Why a catalogue target cannot speak this run's HTTP version to the client (load listens in cleartext):
        skipped with the reason, not run into one failure per stream. A command target speaks what the user says."""
        if isinstance(proxy, CustomProxy):
            return None
        return proxy.client_http_unsupported(variant, False, self.cfg.http_version) or None

    def _custom_options(self, label: str) -> dict[str, object]:
        """--custom LABEL.KEY=VALUE flags for one target, as RequestOptions takes them (headers as a table)."""
        options: dict[str, object] = {}
        headers: dict[str, str] = {}
        for name, key, value in self.cfg.custom:
            if name != label:
                continue
            if key == "header":
                header, value = parse_header_arg(value)
                headers[header] = value
            else:
                options[key] = value
        if headers:
            options["headers"] = headers
        return options

    def _measure(
        self,
        cell: Cell,
        url: str,
        pid: int | None,
        stub_url: str,
        api_key: str | None,
        external: bool = False,
        running: RunningProxy | None = None,
    ) -> str | None:
        """One run of one target at one level, merged into its cell; why the level stopped early, if it did."""
        cfg = self.cfg
        streams = cfg.max_in_flight if cfg.open_loop else int(cell.level)
        work = Workload(
            url,
            cfg.model,
            PROMPT,
            cfg.pacing.tokens,
            streams,
            cfg.warmup_s,
            cfg.duration_s,
            rate=cell.level if cfg.open_loop else None,
            api_key=api_key,
            api=cfg.api,
            accept_encoding=cfg.accept_encoding,
            before_first_token=cfg.before_first_token,
            http_version=cfg.http_version,
            h2_window=cfg.h2_window,
            streams_per_connection=cfg.streams_per_connection,
            transport=cfg.transport,
            h3_window=cfg.h3_window,
            stream_timeout_s=stream_timeout_s(cfg.pacing.stream_ms),
        )
        if cfg.http_version is HttpVersion.HTTP3 and not external:  # the stub serves no QUIC: the floor over 1.1
            work = replace(work, http_version=HttpVersion.HTTP11, h3_window="default")
        cell.http_version = work.http_version
        if external:  # the credentials and headers the user gave are for their target only
            work = replace(
                work, api_key=cfg.target_api_key, headers=cfg.target_headers, jwt=cfg.target_jwt, tls=cfg.target_tls
            )
        if running is not None:  # what this proxy needs of a request: its model names, headers, the id's carrier
            proxy = running.proxy
            work = replace(
                work,
                request_model=proxy.request_model(cfg.model),
                id_in_prompt=proxy.drops_stream_id,
                headers=proxy.request_headers(running.site),
            )
        with ResourceSampler(pid) as sampler, ResourceSampler(self.stub_pid) as stub_cpu, HostSampler() as host:
            reports = self._clients(work, cell, stub_url)
        if stub_cpu.mean_cores is not None:
            cell.stub_cores.append(stub_cpu.mean_cores)
        if host.steal_share is not None:
            cell.steal.append(host.steal_share)
        if host.run_queue is not None:
            cell.run_queue.append(host.run_queue)
        if sampler.mean_cores is not None:
            cell.cores.append(sampler.mean_cores)
        if sampler.median_rss_mb is not None:
            cell.rss_mb.append(sampler.median_rss_mb)
        cell.lag_p99_ms = max([cell.lag_p99_ms, *(r.lag_p99_ms for r in reports)])
        cell.client_cpu = max([cell.client_cpu, *(r.cpu_s / r.wall_s for r in reports if r.wall_s > 0)])
        results = [r for report in reports for r in report.results]
        cell.stopped = next((r.stopped for r in reports if r.stopped), None)
        if cfg.http_version is HttpVersion.HTTP2:
            self._connections(cell, reports)
        run_hist = new_histogram()
        self._join(cell, results, stub_url, run_hist)
        if run_hist.get_total_count():
            cell.run_added_ms.append(MedianAndTail(cell.pct_ms(50, run_hist), cell.pct_ms(99, run_hist)))
        if any(r.interrupted for r in reports):  # a client stopped on SIGINT/SIGTERM: its streams are merged above
            self.signals.fired = True
            raise KeyboardInterrupt
        return cell.stopped

    def _connections(self, cell: Cell, reports: list[WorkerReport]) -> None:
        """HTTP/2: the connections this run opened; a peer limit below what was asked is said once per cell."""
        cell.connections = max(cell.connections, sum(r.connections for r in reports))
        limits = [r.peer_limit for r in reports if r.peer_limit is not None]
        if limits and cell.peer_limit is None:
            cell.peer_limit = min(limits)
            self.console.print(
                f"load: {cell.target} @ {cell.level:g}: {connection_split(cell, self.cfg)}",
                markup=False,
                highlight=False,
            )

    def _clients(self, work: Workload, cell: Cell, stub_url: str) -> list[WorkerReport]:
        if self.cluster is not None:
            return self._cluster_clients(self.cluster, work, cell, stub_url)
        n = self.cfg.client_workers
        if n == 1:
            return [run_worker(work)]
        return self._pool_clients(self._shares(work, n))

    def _pool_clients(self, shares: list[Workload]) -> list[WorkerReport]:
        """One client process per share; a stop signal here (StopSignals raised KeyboardInterrupt) is passed on to
        each (_stop_pool)."""
        ctx = get_context("spawn")
        with ProcessPoolExecutor(len(shares), mp_context=ctx, initializer=ignore_stop_signals) as pool:
            futures: list[concurrent.futures.Future[WorkerReport]] = []
            try:
                # Each submit spawns a process: a stop landing among them left the futures submitted so far unheld,
                # and the pool's exit waited out their whole run. Held, it is raised here with each one submitted
                # known (a pool broken meanwhile, by a Ctrl-C that reached a starting process, fails the next).
                with self.signals.held():
                    for share in shares:
                        futures.append(pool.submit(run_worker, share))
                concurrent.futures.wait(futures)
            except KeyboardInterrupt:
                return _stop_pool(pool, futures)
            return [f.result() for f in futures]

    def _cluster_clients(self, cluster: RayClients, work: Workload, cell: Cell, stub_url: str) -> list[WorkerReport]:
        """The run on the cluster's client workers, their arrival times moved onto the stub host's clock (a stopped
        run's by its first reading: a worker that did not stop in time was killed, and reads nothing more)."""
        before = cluster.clocks(stub_url)
        reports = cluster.run(self._shares(work, len(cluster.actors)))
        after = before if any(r.interrupted for r in reports) else cluster.clocks(stub_url)
        clocks = [RunClock(ip, a, b) for ip, a, b in zip(cluster.ips, before, after, strict=True)]
        for report, clock in zip(reports, clocks, strict=False):
            for r in report.results:
                if r.first_content_t_ns is not None:
                    r.first_content_t_ns += clock.offset_ns
                if r.first_token_t_ns is not None:
                    r.first_token_t_ns += clock.offset_ns
                if r.read_marks:
                    r.read_marks[::2] = array("q", (t + clock.offset_ns for t in r.read_marks[::2]))
        cell.clocks.append(clocks)
        return reports

    @staticmethod
    def _shares(work: Workload, n: int) -> list[Workload]:
        """`work` split over n client workers: streams (closed loop) or arrivals (open loop) shared out."""
        if n == 1:
            return [work]
        if work.rate is not None:  # each client process takes an equal, independent share of the arrivals
            share = max(1, work.max_streams // n)
            return [replace(work, rate=work.rate / n, max_streams=share, seed=work.seed + i) for i in range(n)]
        if (
            work.http_version is HttpVersion.HTTP2 and work.streams_per_connection > 1
        ):  # whole connections per process, each as full as asked
            per = work.streams_per_connection
            conns = -(-work.max_streams // per)
            owned = [conns // n + (1 if i < conns % n else 0) for i in range(n)]
            starts = [per * sum(owned[:i]) for i in range(n)]
            shares = [max(0, min(per * k, work.max_streams - start)) for k, start in zip(owned, starts, strict=True)]
            return [replace(work, max_streams=s) for s in shares if s > 0]
        shares = [work.max_streams // n + (1 if i < work.max_streams % n else 0) for i in range(n)]
        return [replace(work, max_streams=s) for s in shares if s > 0]

    def _join(self, cell: Cell, results: list[StreamResult], stub_url: str, run_hist: HdrHistogram) -> None:
        ok = [r for r in results if r.error is None]
        cell.errors += len(results) - len(ok)
        cell.ends.update(r.end.value for r in results if r.end is not None)
        for r in results:
            if r.ws is not None:
                _websocket_stream(cell, r.ws)
            if r.h3 is not None:
                cell.handshake_ms.append(r.h3.handshake_ns / 1e6)
        cell.error_samples += [r.error for r in results if r.error][: 3 - len(cell.error_samples)]
        for i in range(0, len(ok), AUDIT_BATCH):
            batch = ok[i : i + AUDIT_BATCH]
            try:
                audit = fetch_audit(stub_url, [r.audit_key or r.stream_id for r in batch], timeout_s=AUDIT_TIMEOUT_S)
            except PeerError as exc:
                raise ServiceError(f"the stub stopped answering its audit: {exc}") from None
            entries = audit.by_id()
            for r in batch:
                entry = entries.get(r.audit_key or r.stream_id)
                cell.streams += 1
                cell.lost += r.lost
                cell.out_of_order += r.out_of_order
                cell.reserialized += r.byte_exact is False and r.lost == 0 and r.out_of_order == 0
                cell.encodings[r.content_encoding] += 1
                if r.h3 is not None:
                    cell.data_frames += r.h3.data_events
                    cell.data_reads += r.h3.data_reads
                if r.flow is not None:
                    cell.stall_ms.append(r.flow.stall_ns / 1e6)
                    cell.stalls += r.flow.stalls
                    cell.stalled += r.flow.stalls > 0
                    cell.data_frames += r.flow.data_frames
                    cell.data_reads += r.flow.reads
                if entry is None:
                    cell.unjoined += 1
                    cell.foreign += served_by_a_stub(r.audit_key)
                    continue
                if not entry.verdict.passed:
                    cell.audit_failed += 1
                    continue
                added = None
                write = content_write(entry.log, r.first_token) if entry.log is not None else None
                if entry.log is not None and write is not None and r.first_content_t_ns is not None:
                    added = added_ns(entry.log, write, r.first_content_t_ns)
                    for delay in frame_delays_ns(entry.log, write, r.read_marks or ()) or ():
                        cell.frame_delay.record_value(max(1, min(delay // 1000, HIST_MAX_US)))
                if entry.log is not None and r.first_token_t_ns is not None:
                    self._first_token(cell, entry.log, r.first_token_t_ns)
                if added is not None:
                    added_us = added // 1000
                    cell.hist.record_value(max(1, min(added_us, HIST_MAX_US)))
                    run_hist.record_value(max(1, min(added_us, HIST_MAX_US)))
                    lag_us = r.dispatch_lag_ns // 1000
                    cell.corrected.record_value(max(1, min(added_us + lag_us, HIST_MAX_US)))
                    cell.dispatch_lag.record_value(max(1, min(lag_us, HIST_MAX_US)))

    @staticmethod
    def _first_token(cell: Cell, log: StreamLog, arrival_ns: int) -> None:
        """Reasoning came first: its first delta's arrival minus the stub's write of it (StreamLog.first_token).
        Without reasoning the first token is the first content, whose figure is added TTFT."""
        first = log.first_token
        if first is None or first == log.first_content:
            return
        added = added_ns(log, first, arrival_ns)
        if added is not None:
            cell.first_token.record_value(max(1, min(added // 1000, HIST_MAX_US)))

    def _summarise(self, cells: dict[tuple[float, str], Cell]) -> list[LoadRow]:
        out = []
        for level in self.cfg.level_values:
            direct = cells.get((level, "direct"))
            floor = MedianAndTail()
            direct_missed = None
            if direct:
                floor = MedianAndTail(direct.pct_ms(50), direct.pct_ms(99))
                direct_missed = direct.audit_failed / direct.streams if direct.streams else None
            for (lvl, _name), cell in cells.items():
                if lvl != level:
                    continue
                contention = cell.contention(self.cfg.stub_workers, self.cores, direct_missed)
                out.append(_level_row(cell, floor, self.cfg, contention))
        return out


def _stop_pool(pool: ProcessPoolExecutor, futures: list[concurrent.futures.Future[WorkerReport]]) -> list[WorkerReport]:
    """A stop passed on to every client process, as SIGINT, until each has ended its run and sent back what it
    measured (a Ctrl-C reaches them from the terminal too; a SIGTERM, or a SIGINT sent to this process alone, does
    not); every report marked interrupted."""
    while not all(f.done() for f in futures):
        for pid in list(pool._processes or {}):  # the pool's own processes only
            if _past_start(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGINT)
        concurrent.futures.wait(futures, timeout=FORWARD_EVERY_S)
    reports = [_stopped_report(f) for f in futures]
    for r in reports:
        r.interrupted = True
    return reports


def _past_start(pid: int) -> bool:
    """A client process past its start: its initializer has set SIGTERM's disposition (ignored, then run_worker's).
    Before, SIGINT is Python's KeyboardInterrupt in the middle of its imports (a traceback, a broken pool): it is
    sent once the process can take it, on the next round."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    term = 1 << (signal.SIGTERM - 1)
    return bool((int(fields.get("SigIgn", "0"), 16) | int(fields.get("SigCgt", "0"), 16)) & term)


def _stopped_report(future: concurrent.futures.Future[WorkerReport]) -> WorkerReport:
    """A stopped client's report; an empty one from a process the stop reached while it was still starting (its
    SIGINT was Python's default yet: it died, and the pool broke), before it measured anything."""
    try:
        return future.result()
    except BrokenProcessPool:
        return WorkerReport([], 0.0, 0.0, 0.0, interrupted=True)


def _websocket_stream(cell: Cell, ws: WsStreamFigures) -> None:
    """One stream's WebSocket figures into its cell: every stream started in the window, kept or not."""
    if not ws.upgraded:
        cell.not_upgraded[ws.upgrade_status] += 1
        return
    cell.upgrade_ms.append(ws.upgrade_ns / 1e6)
    cell.messages += ws.messages
    cell.message_reads += ws.message_reads
    if ws.close_code is not None:
        cell.ws_closes[ws.close_code] += 1


def content_write(log: StreamLog, token: int | None) -> int | None:
    """The stub's write that carried token `token` of its stream: its first content write (the audit's, per format:
    OpenAI chat's role delta, Anthropic's message_start... come before it) plus the token's number. A log from a
    stub that did not record its first content write is an OpenAI chat stream's: the role delta is write 0.
    Keep-alive writes (the log's `heartbeats`) between tokens are not tokens: they are stepped over."""
    if token is None:
        return None
    first = log.first_content if log.first_content is not None else 1
    if not log.heartbeats:
        return first + token
    beats, k = frozenset(log.heartbeats), first
    for _ in range(token):  # bounded by the token count the stub was held to (MAX_TOKENS)
        k += 1
        while k in beats:
            k += 1
    return k


def ensure_fd_limit(streams_per_process: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (client processes and proxies inherit it) and say,
    before anything starts, when the streams one client process must hold open cannot fit under it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, FD_CEILING)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    need = streams_per_process + FD_SLACK
    if need > soft:
        raise UsageError(
            f"{streams_per_process} streams per client process need about {need} open files, but this process may "
            f"open {soft} (hard limit {hard}): raise it (ulimit -Hn, LimitNOFILE=) or add `client_workers`"
        )
    return int(soft)


PCTS = (("p50", 50.0), ("p99", 99.0), ("p999", 99.9))
WS_NOT_CARRIED_REMEDY = (
    "the path does not carry the WebSocket upgrade: configure it to (nginx: proxy_http_version 1.1 and "
    "proxy_set_header Upgrade/Connection; Envoy: upgrade_configs; Apache: upgrade=websocket), or measure it over SSE"
)


def _level_row(cell: Cell, floor: MedianAndTail, cfg: LoadConfig, contention: Contention | None = None) -> LoadRow:
    """One target at one level as the model holds it: figures from the merged histograms, warnings with remedies."""
    warnings = []
    if cell.stopped:
        from tokenpath.load.wsconn import NOT_CARRIED

        remedy = (
            WS_NOT_CARRIED_REMEDY
            if NOT_CARRIED in cell.stopped
            else "the target fails every stream: its log, its URL, the credentials it needs (--header, "
            "--api-key-env, --jwt-secret-env)"
        )
        warnings.append({"kind": "stopped_early", "message": cell.stopped, "remedy": remedy})
    contended = contention is not None and (contention.stolen or contention.queued)
    if cell.lag_p99_ms > LAG_WARN_MS and cell.client_cpu <= CPU_WARN and contention is not None and contended:
        warnings.append(
            {
                "kind": "client_lag",
                "message": f"client loop lag p99 {cell.lag_p99_ms:.1f} ms at {100 * cell.client_cpu:.0f} % of a core: "
                f"{contention.host_figures()}",
                "remedy": "the client was not busy, the host is: more --client-workers will not help; stop other work "
                "on the host, lower the concurrency, or use a machine with more cores",
            }
        )
    elif cell.lag_p99_ms > LAG_WARN_MS or cell.client_cpu > CPU_WARN:
        warnings.append(
            {
                "kind": "client_saturated",
                "message": f"client loop lag p99 {cell.lag_p99_ms:.1f} ms, CPU {100 * cell.client_cpu:.0f} % of a core",
                "remedy": "add --client-workers (one per free core) or lower the concurrency",
            }
        )
    if cell.streams and cell.audit_failed / cell.streams > AUDIT_FAIL_WARN:
        sampled = contention or Contention(None, cfg.stub_workers, None, None, os.cpu_count() or 1)
        warnings.append(schedule_missed(cell.audit_failed, cell.streams, sampled, cell.target == "direct"))
    if cell.foreign:
        warnings.append(
            {
                "kind": "other_stub",
                "message": f"{cell.foreign} of {cell.streams} streams served by a stub that is not --stub-url "
                f"{cfg.stub_url or ''} (their chunks carry a stub's id its audit does not know)",
                "remedy": "point --stub-url at the stub this target streams from, or give the target's pool that one "
                "stub only: a stream is joined to the write log of the stub that served it",
            }
        )
    if cell.unjoined - cell.foreign:
        warnings.append(
            {
                "kind": "unjoined",
                "message": f"{cell.unjoined - cell.foreign} of {cell.streams} streams could not be joined to the "
                "stub's log",
                "remedy": "the path drops the X-Tokenpath-Stream header, the body's user field and the chunk ids",
            }
        )
    p50 = cell.pct_ms(50)
    floor_p99 = floor.p99
    if cell.target != "direct" and floor_p99 is not None and p50 is not None and floor_p99 > FLOOR_RATIO_WARN * p50:
        warnings.append(
            {
                "kind": "floor_too_high",
                "message": f"direct p99 {floor_p99:.1f} ms is not small against this p50 {p50:.1f} ms",
                "remedy": "the figure is within what this host can resolve; use a quieter or larger machine",
            }
        )
    clock = None
    if cell.clocks:
        worst_ms = max(c.uncertainty_ns for run in cell.clocks for c in run) / 1e6
        clock = {"uncertainty_ms": worst_ms, "runs": [[c.to_json() for c in run] for run in cell.clocks]}
        if p50 is not None and worst_ms > p50:
            warnings.append(
                {
                    "kind": "clock_uncertain",
                    "message": f"the client-to-stub clock is known to {worst_ms:.3f} ms, "
                    f"more than this p50 {p50:.3f} ms",
                    "remedy": "a faster link between the client and stub nodes, or read the figure as an upper bound",
                }
            )
    total = cell.streams + cell.errors  # every stream started in the measured window
    kept = cell.hist.get_total_count()  # the streams the figures are made of
    row = LoadRow(
        level=cell.level if cfg.open_loop else int(cell.level),
        loop="open" if cfg.open_loop else "closed",
        target=cell.target,
        streams=cell.streams,
        streams_total=total,
        kept=kept,
        excluded=total - kept,
        exclusion_share=(total - kept) / total if total else 0.0,
        errors=cell.errors,
        ends=dict(cell.ends),
        error_samples=tuple(cell.error_samples),
        audit_failed=cell.audit_failed,
        unjoined=cell.unjoined,
        added_ttft_ms=_percentiles(cell, cell.hist),
        runs_added_ttft_ms=tuple(cell.run_added_ms),
        floor_ms=floor,
        cpu_cores=sum(cell.cores) / len(cell.cores) if cell.cores else None,
        rss_mb=max(cell.rss_mb) if cell.rss_mb else None,
        frames_lost=cell.lost,
        frames_out_of_order=cell.out_of_order,
        reserialized_streams=cell.reserialized,
        client_lag_p99_ms=cell.lag_p99_ms,
        client_cpu=cell.client_cpu,
        histogram=cell.hist.encode().decode() if cell.hist.get_total_count() else None,
        warnings=tuple(ResultWarning(**w) for w in warnings),
        unreliable=bool(warnings),
        clock=clock,
        api=cfg.api.value,
        accept_encoding=cfg.accept_encoding or IDENTITY,
        content_encoding="/".join(sorted(cell.encodings)) or IDENTITY,
        added_frame_delay_ms=_percentiles(cell, cell.frame_delay) if cell.frame_delay.get_total_count() else None,
        added_first_token_ms=_percentiles(cell, cell.first_token) if cell.first_token.get_total_count() else None,
    )
    if cfg.http_version is HttpVersion.HTTP2:
        row = replace(row, **_http2_fields(cell, cfg))
    if cfg.transport == WEBSOCKET:
        row = replace(row, transport=WEBSOCKET, websocket=_websocket_figures(cell))
    if cell.http_version is HttpVersion.HTTP3:
        row = replace(row, **_http3_fields(cell))
    if not cfg.open_loop:
        return row
    return replace(
        row,
        added_ttft_corrected_ms=_percentiles(cell, cell.corrected),
        dispatch_lag_ms=_percentiles(cell, cell.dispatch_lag),
        histogram_corrected=cell.corrected.encode().decode() if cell.corrected.get_total_count() else None,
    )


def connection_split(cell: Cell, cfg: LoadConfig) -> str:
    """The line that says a level took more connections than asked: the peer allows fewer streams on one."""
    return (
        f"the peer allows {cell.peer_limit} concurrent streams per connection, {cfg.streams_per_connection} "
        f"were asked: {cell.connections} connections opened"
    )


def _http2_fields(cell: Cell, cfg: LoadConfig) -> dict[str, Any]:
    """A level's HTTP/2 figures: connections, flow-control stalls (per stream), DATA frames per read."""
    stall = sorted(cell.stall_ms)
    stalls = FlowControlStalls(
        streams=len(stall),
        stalled_streams=cell.stalled,
        stalls=cell.stalls,
        stall_ms_p50=percentile(stall, 50) if stall else None,
        stall_ms_p99=percentile(stall, 99) if stall else None,
    )
    return {
        "http_version": HttpVersion.HTTP2,
        "streams_per_connection": cfg.streams_per_connection,
        "connections": cell.connections or None,
        "connection_split": connection_split(cell, cfg) if cell.peer_limit is not None else None,
        "flow_control_stalls": stalls,
        "data_frames_per_read": cell.data_frames / cell.data_reads if cell.data_reads else None,
    }


def _http3_fields(cell: Cell) -> dict[str, Any]:
    """A level's HTTP/3 figures: one connection per stream, each one's handshake (apart from TTFT), DATA per read."""
    handshakes = sorted(cell.handshake_ms)
    return {
        "http_version": HttpVersion.HTTP3,
        "streams_per_connection": 1,
        "connections": len(handshakes) or None,
        "handshake_ms": MedianAndTail(percentile(handshakes, 50), percentile(handshakes, 99)) if handshakes else None,
        "data_frames_per_read": cell.data_frames / cell.data_reads if cell.data_reads else None,
    }


def _websocket_figures(cell: Cell) -> WebSocketLoad:
    """A level's upgrades (how many, their time, what came instead of 101) and messages per read."""
    upgrades = sorted(cell.upgrade_ms)
    return WebSocketLoad(
        upgraded=len(upgrades),
        not_upgraded={str(status): n for status, n in sorted(cell.not_upgraded.items())},
        upgrade_ms_p50=percentile(upgrades, 50) if upgrades else None,
        upgrade_ms_p99=percentile(upgrades, 99) if upgrades else None,
        messages=cell.messages,
        messages_per_read=cell.messages / cell.message_reads if cell.message_reads else None,
        closes_before_final={str(code): n for code, n in sorted(cell.ws_closes.items())},
    )


def _percentiles(cell: Cell, hist: HdrHistogram) -> Percentiles:
    return Percentiles(*(cell.pct_ms(q, hist) for _, q in PCTS))


def _config_json(cfg: LoadConfig) -> dict[str, Any]:
    h2 = cfg.http_version is HttpVersion.HTTP2
    return {
        "targets": list(cfg.targets),
        "levels": list(cfg.levels),
        "warmup_s": cfg.warmup_s,
        "duration_s": cfg.duration_s,
        "runs": cfg.runs,
        "client_workers": cfg.client_workers,
        "stub_workers": cfg.stub_workers,
        "model": cfg.model,
        "loop": "open" if cfg.open_loop else "closed",
        "rates": list(cfg.rates),
        "max_in_flight": cfg.max_in_flight,
        "target_url": cfg.target_url,
        "stub_url": cfg.stub_url,
        "cluster": cfg.cluster,
        "stub_node": cfg.stub_node,
        "target_insecure": cfg.target_tls.insecure,
        "target_cacert": cfg.target_tls.cacert,
        "api": cfg.api.value,
        "accept_encoding": cfg.accept_encoding,
        "http_version": cfg.http_version,
        "h2_window": cfg.h2_window if h2 else None,
        "streams_per_connection": cfg.streams_per_connection,
        "transport": cfg.transport,
        "h3_window": cfg.h3_window if cfg.http_version is HttpVersion.HTTP3 else None,
        **{k: getattr(cfg.pacing, k) for k in Pacing.OVERRIDABLE if k not in Pacing.FRAME},  # the stream's pacing
    }
