"""`tokenpath matrix`: the buffering experiment end to end.

For each link/TLS environment: start one stub and every path's proxy, certify (direct streams cleanly and the
controls are seen; over HTTP/3 through Caddy 2.11's clean h3 site, experiment/h3controls.py), then run every
condition: rounds of one stream per path, interleaved so that drift on the host hits every path alike, each stream
audited by the stub and excluded when its pacing failed. Rows, floors and verdicts come from the runs; everything,
raw runs included, goes to results.json.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from tokenpath.axes import replay_file, transport_for
from tokenpath.controls.policies import CORK_MS
from tokenpath.errors import CertificationError, PeerError, ServiceError, TokenpathError
from tokenpath.experiment.attribution import attribute
from tokenpath.experiment.h3controls import H3_CONTROLS, H3_DIRECT, H3_FRONT, not_run_checks, start_h3_control
from tokenpath.experiment.measure import RunRecord, join
from tokenpath.experiment.pairs import Pairing, bracketed, pair, paired, streams_per_condition, summary
from tokenpath.experiment.rows import Floor, build_row, undecided
from tokenpath.experiment.spec import Condition, Experiment, Link, PathSpec, falls_back, stub_member, stub_pacing
from tokenpath.hostport import join_hostport
from tokenpath.links import netns
from tokenpath.origins.catalogue import lookup as lookup_origin
from tokenpath.origins.process import await_ready as await_origin
from tokenpath.origins.process import spawn as spawn_origin
from tokenpath.probe.client import ProbeConfig, new_stream_id
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import Trace
from tokenpath.probe.transport import SocketFactory, Target, TLSOptions, Transport, open_connection, tcp_connect
from tokenpath.probe.wsfallback import NO_FALLBACK, WsFallback
from tokenpath.progress import escaped, progress_bar, styled
from tokenpath.proxies import ProxyError, RunningProxy, pinned
from tokenpath.proxies.attached import AttachedProxy
from tokenpath.proxies.base import (
    Endpoint,
    Proxy,
    Site,
    Wrap,
    attach,
    await_ready,
    client_version_unsupported,
    free_port,
    new_workdir,
    no_wrap,
    spawn,
)
from tokenpath.proxies.custom import CustomProxy
from tokenpath.proxies.relays import BASE_CONTROLS, COMPRESSION_CONTROLS, CONTROLS, ControlProxy
from tokenpath.report import tables
from tokenpath.results import model
from tokenpath.results.model import (
    Certification,
    Check,
    Drift,
    FloorEntry,
    MatrixResults,
    MatrixRow,
    PathSkip,
    Provenance,
    ProxyInfo,
)
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.serve.tlscert import TLSFiles, self_signed
from tokenpath.stats import percentile
from tokenpath.stopsignals import StopSignals
from tokenpath.stub.control import fetch_audit
from tokenpath.wire.apis import Api
from tokenpath.wire.ending import STREAM_END
from tokenpath.wire.httpversion import HttpVersion

# Certification runs at a fixed condition every control is sensitive to: 60-byte frames every 50 ms.
CERT_INTERVAL_MS, CERT_FRAME_BYTES, CERT_FRAMES = 50.0, 60, 12
CERT_RUNS = 3
# Rounds a condition (or a certification) adds, at most, for the rows its rounds could not place against the direct
# floor (rows.ttft_evidence: a first token beyond the floor by less than the host moved the streams): each one the
# direct path and those paths, side by side, so a loaded round widens the spread instead of making a verdict.
MAX_EXTRA_ROUNDS = 6
CERT_MAX_DIRECT_FPR = 1.05
CERT_STREAM_MS = (CERT_FRAMES - 1) * CERT_INTERVAL_MS  # first token to last at the certification condition
CERT_ACCEPT_ENCODING = "gzip"  # what the compressing controls answer (controls/compress.py)
# Writes closer than this are one moment (a format's events written in one go): the audit's own smallest tolerance.
SAME_MOMENT_MS = 2.0


@dataclass
class Environment:
    """One link/TLS setting: a stub, the proxies, and how the client reaches them."""

    link: Link
    tls: bool
    stub_url: str = ""
    upstream: Endpoint = field(default_factory=lambda: Endpoint("127.0.0.1", 0))
    listen_host: str = "127.0.0.1"
    running: dict[str, RunningProxy] = field(default_factory=dict)
    controls: dict[str, RunningProxy] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    cacert: str | None = None
    socket_factory: SocketFactory = tcp_connect
    wrap: Callable[[list[str]], list[str]] = lambda argv: argv
    _ports: Iterator[int] = field(default_factory=lambda: itertools.count(9000))

    def next_port(self) -> int:
        """A free loopback port; inside a fresh namespace every port is free, so they are simply counted."""
        return free_port() if self.link == "loopback" else next(self._ports)

    def connector(self) -> Callable[[Target, ProbeConfig], Transport]:
        factory = self.socket_factory

        def connect(target: Target, cfg: ProbeConfig) -> Transport:
            return open_connection(
                target, connect_timeout_s=cfg.connect_deadline_s, tls=cfg.tls, socket_factory=factory
            )

        return connect


class MatrixRunner:
    def __init__(self, experiment: Experiment, out_dir: Path, *, force: bool = False, console: Console) -> None:
        self.exp = experiment
        self.out_dir = out_dir
        self.force = force
        self.console = console
        # What the run has found so far; `results()` freezes it into the model (written after every condition).
        self.provenance = Provenance.now("matrix")
        self.certification = Certification()
        self.proxies: dict[str, ProxyInfo] = {}
        self.skipped: list[PathSkip] = []
        self.rows: list[MatrixRow] = []
        self.floors: list[FloorEntry] = []
        self.interrupted = False
        self._pairings: dict[str, list[Pairing]] = {}  # a condition's pairs against a started origin, per path
        # SIGTERM as Ctrl-C for the whole run: the rows so far written `interrupted`, every child and namespace gone.
        self.signals = StopSignals()

    # public ------------------------------------------------------------------------------------------
    def run(self) -> MatrixResults:
        # before anything is measured: an --out that is a file ended the whole certified run in a traceback
        model.prepare_out_dir(self.out_dir)
        with self.signals:
            return self._run_all()

    def _run_all(self) -> MatrixResults:
        groups: dict[tuple[Link, bool], list[Condition]] = {}
        for cond in self.exp.conditions:
            groups.setdefault((cond.link, cond.tls), []).append(cond)
        total = sum(len(c) for c in groups.values()) * self._streams_per_condition()
        self._install_releases()
        with contextlib.ExitStack() as origin:
            if self.exp.endpoint is not None and self.exp.endpoint.kind:
                self._start_origin(origin, self.exp.endpoint.kind)
            return self._run(groups, total)

    def _start_origin(self, stack: contextlib.ExitStack, kind: str) -> None:
        """The real origin of `[upstream] kind`, started for the whole run on a free port and stopped after it."""
        assert self.exp.endpoint is not None
        self.console.print(f"starting {escaped(kind)} (a real inference server; its streams are paired, serially)")
        with self.signals.held():  # its stop on `stack` before a stop signal can land; the load is not held
            running = stack.enter_context(spawn_origin(lookup_origin(kind)))
        await_origin(running)
        info = running.info()
        self.exp.endpoint = self.exp.endpoint.started(running.url, info)
        said = f"{kind}: {running.url} ({', '.join(f'{k} {v}' for k, v in info.items())})"  # the origin's own words
        self.console.print(said, markup=False)

    def _streams_per_condition(self) -> int:
        """The streams one condition measures (the progress bar's unit): against a started origin each round
        brackets every path with direct streams, so direct is measured once more than every other path."""
        paired = self.exp.endpoint is not None and bool(self.exp.endpoint.kind)
        return streams_per_condition([p.label for p in self.exp.paths], self.exp.runs, paired)

    def _run(self, groups: dict[tuple[Link, bool], list[Condition]], total: int) -> MatrixResults:
        if self.exp.endpoint is not None:
            e = self.exp.endpoint
            self.console.print(
                f"upstream: {e.label} ({e.declared}), model {e.model}: {total} streams of at most {e.max_tokens} "
                f"tokens; {e.note}; certification and the controls run on the stub",
                markup=False,  # the experiment file's names and words, as typed
            )
            self._preflight()
        progress = progress_bar(self.console)
        ticked = 0  # the streams measured in the current condition

        def tick(what: str) -> None:  # one stream measured: a line off a terminal
            nonlocal ticked
            progress.update(task, description=what)
            progress.advance(task)
            ticked += 1

        try:
            with progress:
                task = progress.add_task("matrix", total=total)
                for (link, tls), conditions in groups.items():
                    compressed = any(c.compressed for c in conditions)
                    h3 = any(c.http_version is HttpVersion.HTTP3 for c in conditions)
                    with self._environment(link, tls, compressed, h3) as env:
                        if env is None:
                            progress.advance(task, len(conditions) * self._streams_per_condition())
                            continue
                        self._certify(env, conditions)
                        self.write()  # the certification, and what will be measured, are on disk from here on
                        for cond in conditions:
                            progress.update(task, description=cond.label)
                            ticked = 0
                            self._condition(env, cond, tick)
                            # A path skipped in it (an HTTP version it cannot speak) or exited: its streams are done.
                            progress.advance(task, max(0, self._streams_per_condition() - ticked))
        except KeyboardInterrupt:
            self.interrupted = True
            self.console.print("[yellow]interrupted: writing the rows measured so far[/]")
        finally:
            self.write()
        return self.results()

    def results(self) -> MatrixResults:
        return MatrixResults(
            provenance=self.provenance,
            experiment=self.exp.to_json(),
            certification=self.certification,
            proxies=dict(self.proxies),
            skipped=tuple(self.skipped),
            rows=tuple(attribute(self.rows)),  # which origin behaviour made each verdict, over every row so far
            floors=tuple(self.floors),
            exclusion_shares=model.exclusion_shares(self.rows),
            interrupted=self.interrupted,
        )

    def write(self) -> None:
        """results.json after every condition, so an interrupted run keeps what it measured. The renderings
        (report.html, table.md, results.csv) are made once from it when the run ends (report.render)."""
        model.write(self.results(), self.out_dir)

    # environments ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _environment(
        self, link: Link, tls: bool, compressed: bool = False, h3: bool = False
    ) -> Iterator[Environment | None]:
        env = Environment(link, tls)
        with contextlib.ExitStack() as stack:
            if link == "veth":
                reason = netns.available()
                if reason:
                    self._skip_all(f"{link} link", reason)
                    yield None
                    return
                with self.signals.held():  # made and on `stack` (its exit deletes them) before a stop lands
                    pair = stack.enter_context(netns.VethPair())
                env.listen_host = pair.server_addr
                env.socket_factory = pair.client_connect
                env.wrap = pair.wrap_server
            tmp = Path(tempfile.mkdtemp(prefix="tokenpath-matrix-"))
            stack.callback(shutil.rmtree, tmp, ignore_errors=True)
            files: TLSFiles | None = None
            if tls:
                files = self_signed(tmp / "tls", ["127.0.0.1", env.listen_host])
                env.cacert = str(files.cert)
            stub_host, stub_port = env.listen_host, env.next_port()
            bind = stub_host
            if link == "loopback" and self.exp.stub_listen is not None:  # attached paths were pointed at it
                bind, stub_port = self.exp.stub_listen.host, self.exp.stub_listen.port
                stub_host = "127.0.0.1" if bind in ("0.0.0.0", "::") else bind
            replays = dict.fromkeys(f for c in self.exp.conditions if (f := replay_file(c)) is not None)
            recordings = [a for f in replays for a in ("--recording", f)]  # each condition's request names its own
            stub_argv = env.wrap(tokenpath_argv("stub", "--host", bind, "--port", str(stub_port), *recordings))
            stub = ServiceProcess(stub_argv, "stub")
            stack.callback(stub.stop)
            with self.signals.held(until=lambda: stub.pid is not None):  # not inside Popen: stub.stop reaches it
                stub.start()
            env.stub_url = f"http://{join_hostport(stub_host, stub_port)}"
            env.upstream = Endpoint("127.0.0.1" if link == "loopback" else stub_host, stub_port)
            for path in self.exp.paths:
                if path.proxy == "direct":
                    continue
                running = self._start(env, path, tmp, stack, tls=files, fronts_endpoint=self.exp.endpoint is not None)
                if running is not None:
                    env.running[path.label] = running
            # The compressing controls only where a condition asks for a Content-Encoding: they are what it is
            # certified against, as cork and buffer are for every condition.
            for control in (*BASE_CONTROLS, *(COMPRESSION_CONTROLS if compressed else ())):
                running = self._start(env, PathSpec(control.name), tmp, stack, tls=files)
                if running is None:
                    raise CertificationError(f"control {control.name} did not start: {env.skipped[control.name]}")
                env.controls[control.name] = running
            if h3:  # a condition over HTTP/3 (TLS, loopback: axes.HTTP_VERSION's value_needs): its controls
                assert files is not None
                self._start_h3_controls(env, files, stack)
            yield env

    def _start_h3_controls(self, env: Environment, files: TLSFiles, stack: contextlib.ExitStack) -> None:
        """Caddy 2.11's clean h3 site in front of the stub, its response_buffers variant, and Caddy in front of a
        clear-text cork relay (experiment/h3controls.py); one that does not start fails certification with its
        reason."""
        front = self.exp.proxy(H3_FRONT)
        reason = front.missing_reason()
        if reason:
            raise CertificationError(f"HTTP/3 conditions need {H3_FRONT} for their controls: {reason}")
        for control in H3_CONTROLS:
            listen, relay_listen = Endpoint(env.listen_host, env.next_port()), Endpoint("127.0.0.1", env.next_port())
            try:
                started = start_h3_control(
                    control, front, env.upstream, listen, relay_listen, files, lambda p, s: self._launch(p, s, stack)
                )
            except ProxyError as exc:
                raise CertificationError(f"control {control.name} did not start: {exc}") from None
            env.controls[control.name] = started[-1]

    def _start(
        self,
        env: Environment,
        path: PathSpec,
        tmp: Path,
        stack: contextlib.ExitStack,
        tls: TLSFiles | None,
        fronts_endpoint: bool = False,
    ) -> RunningProxy | None:
        proxy = self.exp.proxy(path.proxy)
        endpoint = self.exp.endpoint if fronts_endpoint else None
        reason = proxy.missing_reason() or (proxy.tls_unsupported if tls else None) or None
        if not reason and endpoint is not None and endpoint.https:
            reason = proxy.upstream_tls_unsupported or None
        if proxy.openai_only and endpoint is None:
            reason = "re-serialises OpenAI chunks: a gateway, measured by `tokenpath load`, not the byte-level matrix"
        if proxy.attached and not reason:
            return self._attach(env, path, proxy, tmp)
        if reason is None:
            listen = Endpoint(env.listen_host, env.next_port())
            site = Site(listen, env.upstream, new_workdir(proxy.name), proxy.variant(path.variant), tls)
            if endpoint is not None:  # the proxy fronts the real endpoint; the controls stay on the stub
                site.upstream, site.upstream_tls = endpoint.upstream(), endpoint.upstream_tls()
                site.upstream_host, site.upstream_api_key_env = endpoint.target.host_header, endpoint.api_key_env or ""
                site.upstream_path, site.upstream_model = endpoint.api_base_path, endpoint.model  # for AI gateways
            try:
                running = self._launch(proxy, site, stack, wrap=env.wrap, connect=self._ready_check(env))
            except ProxyError as exc:
                reason = f"failed to start: {exc}"
            else:
                known = self.proxies.get(proxy.name) or ProxyInfo(proxy.version())
                entry = {"config": running.effective, "line": site.variant.line}  # the report shows the line
                variants = {**known.variants, path.variant: entry}
                self.proxies[proxy.name] = ProxyInfo(known.version, variants)
                return running
        if path.proxy in {c.name for c in CONTROLS}:
            env.skipped[path.label] = reason  # a control that did not start fails certification, with this reason
        else:
            self._skip(env, path, reason)
        return None

    def _launch(
        self,
        proxy: Proxy,
        site: Site,
        stack: contextlib.ExitStack,
        *,
        wrap: Wrap = no_wrap,
        connect: Callable[[Endpoint], Any] | None = None,
    ) -> RunningProxy:
        """The proxy spawned with its stop on `stack` before a stop signal can land (held), then awaited, which a
        stop may cut; one that fails to start is stopped at once, not when its environment ends."""
        stop = stack.enter_context(contextlib.ExitStack())
        with self.signals.held():
            running = spawn(proxy, site, wrap=wrap)
            stop.callback(running.stop)
        try:
            await_ready(running, wrap=wrap, connect=connect)
        except ProxyError:
            stop.close()
            raise
        return running

    def _attach(self, env: Environment, path: PathSpec, proxy: Proxy, tmp: Path) -> RunningProxy | None:
        """A path already running: only on loopback (a veth namespace cannot reach it), after it accepts. It has no
        files of ours: its site's directory is a name inside the environment's own (removed with it), never made."""
        assert isinstance(proxy, AttachedProxy)
        reason = None if env.link == "loopback" else "already running on this host's network, not in a namespace"
        reason = reason or (None if env.tls else proxy.plain_unsupported or None)
        if reason is None:
            site = Site(proxy.listen, env.upstream, tmp / f"attached-{proxy.name}")
            try:
                running = attach(proxy, site, self._ready_check(env))
            except ProxyError as exc:
                reason = str(exc)
            else:
                self.proxies[proxy.name] = ProxyInfo(proxy.version(), {"stock": {"config": running.effective}})
                return running
        self._skip(env, path, reason)
        return None

    def _skip(self, env: Environment, path: PathSpec, reason: str) -> None:
        env.skipped[path.label] = reason
        where = f"{path.label} ({env.link}{', tls' if env.tls else ''})"
        self.console.print(f"{styled(f'skipping {where}:', 'yellow')} {escaped(reason)}")
        self._record_skip(f"{path.label} [{env.link}{' tls' if env.tls else ''}]", reason)

    def _ready_check(self, env: Environment) -> Callable[[Endpoint], Any]:
        return lambda ep: env.socket_factory(ep.host, ep.port, 0.5)

    def _skip_all(self, what: str, reason: str) -> None:
        self.console.print(f"{styled(f'skipping every {what} condition:', 'yellow')} {escaped(reason)}")
        self._record_skip(what, reason)

    def _record_skip(self, path: str, reason: str) -> None:
        self.skipped.append(PathSkip(path, reason))

    # measuring ---------------------------------------------------------------------------------------
    def _endpoint_probe(
        self, env: Environment, url: str, label: str, check: bool = False, cond: Condition | None = None
    ) -> RunRecord:
        """One stream to the real endpoint, direct or through a path: the file's model, prompt and key, in the
        condition's HTTP version (over HTTP/2 an endpoint or path that will not speak h2 fails the run)."""
        endpoint = self.exp.endpoint
        assert endpoint is not None
        running = env.running.get(label)
        stream_id = new_stream_id()
        record = RunRecord(label, stream_id, audited=False)
        model, headers = endpoint.model, endpoint.headers
        api_key = endpoint.api_key()
        tls = TLSOptions(cacert=endpoint.cacert)
        if running is not None:
            model = running.proxy.request_model(model)
            headers += running.proxy.request_headers(running.site)
            api_key = running.proxy.api_key(running.site) or api_key  # a gateway's own token replaces the key
            tls = _client_tls(env, running)
        cfg = ProbeConfig(
            url=url,
            model=model,
            prompt=endpoint.prompt,
            max_tokens=endpoint.max_tokens,
            extra_body=endpoint.sampling,
            headers=headers,
            api_key=api_key,
            tls=tls,
            first_byte_timeout_s=60,
            idle_timeout_s=60,
            total_timeout_s=300,
        )
        if cond is not None:  # the condition's HTTP version and windows; a started origin's format on its route
            cfg = replace(
                cfg, **cond.probe_settings(), ws_fallback=self._ws_fallback(cond), url=endpoint.for_api(url, cond.api)
            )
        try:
            trace = _stream(env, cfg, stream_id)
        except TokenpathError as exc:
            if check:
                raise
            record.error, record.end = str(exc), STREAM_END.of(exc)
        else:
            join(record, trace, None)
        return record

    def _ws_fallback(self, cond: Condition) -> WsFallback:
        """A WebSocket condition's probes follow the experiment's fallback policy ([websocket]): a path that does
        not carry the upgrade costs what it costs an agent, and its row says how much. A WebSocket-only API's client
        has no SSE to fall back to (the Realtime API's): a refused upgrade is its result."""
        return self.exp.ws_fallback if falls_back(cond) else NO_FALLBACK

    def _install_releases(self) -> None:
        """The preflight of every NAME@VERSION path: its release installed (or found cached) before the first stub
        or stream, so that a version the registry lacks is one line and nothing ran (proxies/pinned.py)."""
        for name in dict.fromkeys(p.proxy for p in self.exp.paths if p.proxy != "direct"):
            proxy = self.exp.proxy(name)
            if isinstance(proxy, pinned.OnDemand) and proxy.release is not None:
                self.console.print(f"preflight: {name}: {proxy.release.label}", markup=False, highlight=False)
                pinned.prepare(proxy)  # ProxyError "NAME@VERSION: PyPI has no ..." stops the run here

    def _preflight(self) -> None:
        """One direct stream before anything starts: a wrong key, model or URL is one line, not a run of errors."""
        assert self.exp.endpoint is not None
        try:
            probe = self._endpoint_probe(Environment("loopback", False), self.exp.endpoint.url, "direct", check=True)
        except TokenpathError:
            self.console.print("[red]the endpoint failed a direct stream before the run: nothing was measured[/]")
            raise  # its own class and exit code: 401 is a status error, a bad name a DNS error
        if probe.metrics is None or probe.metrics.ttft_ms is None:
            raise ServiceError("the endpoint's direct stream carried no content frame: nothing was measured")
        if probe.end is not None and probe.end.cut:
            raise ServiceError(f"the endpoint's direct stream was cut ({probe.end.describe()}): nothing was measured")

    def _endpoint_round(self, env: Environment, paths: list[tuple[str, str]], cond: Condition) -> list[RunRecord]:
        """One stream per path, direct first; each path's TTFT is compared with the direct stream of its round
        (an endpoint's TTFT drifts by far more than a proxy adds, so only a same-round difference means much). A
        started origin's round brackets every path with direct streams and pairs each with the two around it."""
        if self.exp.endpoint is not None and self.exp.endpoint.kind:
            return self._paired_round(env, paths, cond)
        records = [self._endpoint_probe(env, url, label, cond=cond) for label, url in paths]
        first = next((r for r in records if r.path == "direct"), None)
        direct = first.metrics.ttft_ms if first is not None and first.metrics and not first.cut else None
        for record in records:
            ttft = record.metrics.ttft_ms if record.metrics else None
            if ttft is not None and direct is not None:
                record.path_added_ttft_ms = ttft - direct
        return records

    def _paired_round(self, env: Environment, paths: list[tuple[str, str]], cond: Condition) -> list[RunRecord]:
        """direct, path 1, direct, path 2, ..., direct, serial: each path's added TTFT against the mean of the two
        directs around it, the run excluded (counted) when they disagree (experiment/pairs.py)."""
        urls = dict(paths)
        records = [self._endpoint_probe(env, urls[label], label, cond=cond) for label in bracketed(list(urls))]
        for k, record in enumerate(records):
            if record.path == "direct" or record.metrics is None:
                continue
            before, after = records[k - 1].metrics, records[k + 1].metrics
            paired = pair(record.metrics, before, after)
            record.path_added_ttft_ms = paired.added_ttft_ms
            record.unpaired = paired.excluded_because
            self._pairings.setdefault(record.path, []).append(paired)
        return records

    def _probe(self, env: Environment, url: str, label: str, cond: Condition, tokens: int) -> RunRecord:
        """One stream of `cond` (its format, Accept-Encoding, HTTP version; the stub paced per its `tokenpath`
        member), its deadlines from the stream's own length (Pacing.stream_ms)."""
        running = env.running.get(label)
        api_key = running.proxy.api_key(running.site) if running is not None else None  # e.g. the gateway's JWT
        stream_id = new_stream_id()
        record = RunRecord(label, stream_id)
        stream_s = stub_pacing(cond, tokens, self.exp.ttft_ms).stream_ms / 1000
        model, headers = "tokenpath-stub", ()  # type: tuple[str, tuple[tuple[str, str], ...]]
        if running is not None:  # what the proxy needs of a request (a gateway's model names, routing headers)
            model, headers = running.proxy.request_model(model), running.proxy.request_headers(running.site)
        member = stub_member(cond, tokens, self.exp.ttft_ms)
        cfg = ProbeConfig(
            url=url,
            model=model,
            headers=headers,
            extra_body=(("tokenpath", member),),
            tls=_client_tls(env, running),
            api_key=api_key,
            first_byte_timeout_s=10 + 2 * stream_s,
            idle_timeout_s=10 + 2 * stream_s,
            total_timeout_s=30 + 3 * stream_s,
        )
        cfg = replace(cfg, **cond.probe_settings(), ws_fallback=self._ws_fallback(cond))
        try:
            record.trace = _stream(env, cfg, stream_id)
        except TokenpathError as exc:
            record.error, record.end = str(exc), STREAM_END.of(exc)
        return record

    def _round(self, env: Environment, paths: list[tuple[str, str]], cond: Condition, tokens: int) -> list[RunRecord]:
        """One stream per path (in the condition's format and Accept-Encoding), then one audit request for all."""
        records = [self._probe(env, url, label, cond, tokens) for label, url in paths]
        try:
            audit = fetch_audit(env.stub_url, [r.stream_id for r in records], connect=env.socket_factory)
        except PeerError as exc:
            raise ServiceError(f"the stub stopped answering its audit: {exc}") from None
        entries = audit.by_id()
        for record in records:
            entry = entries.get(record.stream_id)
            log = entry.log if entry is not None else None
            # The declared rule decides, applied to the stub's own timestamps (not the stub's default verdict).
            record.audit = self.exp.exclusion.judge(log) if log is not None else None
            if record.trace is not None:
                join(record, record.trace, log)
                record.trace = None
        return records

    def _settle(
        self,
        env: Environment,
        paths: dict[str, tuple[PathSpec, str]],
        runs: dict[str, list[RunRecord]],
        cond: Condition,
        tokens: int,
        tick: Callable[[str], None] | None = None,
        direct: str = "direct",
    ) -> None:
        """More rounds of the direct path (`direct`: its label) and the paths whose rows are still undecided
        (rows.undecided), up to MAX_EXTRA_ROUNDS, each appended to `runs`: only more paired rounds tell a loaded host
        from a path's delay. A row still undecided after them says so (within_floor None), never a verdict the load
        made."""
        if direct not in paths:
            return
        for extra in range(MAX_EXTRA_ROUNDS):
            floor = Floor.from_direct(runs[direct])
            open_rows = [
                label
                for label, (spec, _) in paths.items()
                if label != direct and runs[label] and undecided(build_row(spec, cond, runs[label], floor), floor)
            ]
            if not open_rows:
                return
            round_paths = [(label, paths[label][1]) for label in (direct, *open_rows)]
            for record in self._round(env, round_paths, cond, tokens):
                runs[record.path].append(record)
                if tick is not None:
                    tick(f"{cond.label}, extra round {extra + 1} (first token undecided), {record.path}")

    def _certify(self, env: Environment, conditions: Sequence[Condition] = ()) -> None:
        # The controls are certified over each HTTP version a condition speaks: over HTTP/2 the relays carry the
        # stub's h2c (buffer holds each stream to its end, controls/h2hold.py), and the probe must see them as over
        # HTTP/1.1 before an HTTP/2 row is believed. (The default window: 12 small frames never near it.)
        versions = sorted({c.http_version for c in conditions} | {HttpVersion.HTTP11})
        checks: list[Check] = []
        direct_runs: list[RunRecord] = []
        for version in versions:
            if version is HttpVersion.HTTP3:
                checks += self._certify_h3(env)
                continue
            version_checks, version_direct = self._certify_controls(env, version)
            checks += version_checks
            if version == HttpVersion.HTTP11:
                direct_runs = version_direct  # the stub's drift, as every certification has reported it
        if any(c.compressed for c in conditions):
            checks += self._certify_compression(env)
        for api in dict.fromkeys(c.api for c in conditions if c.api is not Api.OPENAI):
            checks.append(self._certify_format(env, api))
        passed = all(c.passed for c in checks)
        where = f"{env.link}{', tls' if env.tls else ''}"
        drift = emitter_drift(direct_runs)
        cert = self.certification
        all_checks = (*cert.checks, *(replace(c, environment=where) for c in checks))
        self.certification = Certification(
            passed=passed and all(c.passed for c in all_checks),
            forced=self.force,
            checks=all_checks,
            emitter_drift_ms={**cert.emitter_drift_ms, where: drift},
        )
        self.console.print(f"certify ({escaped(where)}): emitter drift {tables.describe_drift(drift)}")
        for c in checks:
            mark = "[green]ok[/]" if c.passed else "[bold red]FAILED[/]"
            self.console.print(f"certify ({escaped(where)}): {escaped(c.name)}: {mark} ({escaped(c.evidence)})")
        if not passed and not self.force:
            raise CertificationError(
                f"certification failed on {where}: the instrument cannot be trusted on this host now "
                "(see the checks above); `force` measures anyway and marks every table UNCERTIFIED"
            )

    def _certification_rows(
        self, env: Environment, controls: Sequence[ControlProxy], cond: Condition
    ) -> tuple[dict[str, list[RunRecord]], dict[str, MatrixRow]]:
        """CERT_RUNS rounds over the direct path and these controls in one condition: the runs and their rows
        (each against the direct floor)."""
        paths = [("direct", env.stub_url)] + [(c.name, env.controls[c.name].url) for c in controls]
        return self._rounds_against(env, paths, cond)

    def _rounds_against(
        self, env: Environment, paths: list[tuple[str, str]], cond: Condition
    ) -> tuple[dict[str, list[RunRecord]], dict[str, MatrixRow]]:
        """CERT_RUNS rounds over `paths`, the first of them the direct one: the runs and the rows against it."""
        runs: dict[str, list[RunRecord]] = {label: [] for label, _ in paths}
        for _ in range(CERT_RUNS):
            for record in self._round(env, paths, cond, CERT_FRAMES):
                runs[record.path].append(record)
        direct = paths[0][0]  # "direct", or over HTTP/3 "h3-direct"
        self._settle(
            env, {label: (PathSpec(label), url) for label, url in paths}, runs, cond, CERT_FRAMES, direct=direct
        )
        floor = Floor.from_direct(runs[direct])
        return runs, {label: build_row(PathSpec(label), cond, rs, floor) for label, rs in runs.items()}

    def _certify_h3(self, env: Environment) -> list[Check]:
        """The checks over HTTP/3, through Caddy 2.11's clean h3 site (experiment/h3controls.py): h3-direct streams
        cleanly (the floor of every HTTP/3 row), its response_buffers variant is seen held and the cork relay behind
        it in bursts, and every probe spoke HTTP/3; the controls that cannot speak it are named in the certificate
        with why."""
        cond = Condition(CERT_INTERVAL_MS, CERT_FRAME_BYTES, env.link, env.tls, http_version=HttpVersion.HTTP3)
        runs, rows = self._rounds_against(env, [(c.name, env.controls[c.name].url) for c in H3_CONTROLS], cond)
        spoke = {r.metrics.http_version for rs in runs.values() for r in rs if r.metrics is not None}
        return [
            *not_run_checks(),
            _check(
                f"{H3_DIRECT} streams cleanly (HTTP/3)",
                rows[H3_DIRECT],
                lambda r: (r.fpr_median or 99) <= CERT_MAX_DIRECT_FPR and r.excluded <= r.runs // 3,
            ),
            _check("Caddy response_buffers seen held (HTTP/3)", rows["h3-buffer"], _held),
            _check("cork relay behind Caddy seen (bursts, late) (HTTP/3)", rows["h3-cork"], _corked),
            Check("probes spoke HTTP/3", spoke == {HttpVersion.HTTP3}, f"versions seen: {sorted(spoke)}"),
        ]

    def _certify_controls(self, env: Environment, version: HttpVersion) -> tuple[list[Check], list[RunRecord]]:
        """The base checks over one client HTTP version: direct streams cleanly, pass within the floor, buffer and
        cork seen for what they are. In a TLS environment the controls terminate TLS too: the cork control then sends
        what it held as separate TLS records in one burst (as HAProxy 2.8+ does), and the client must still see one
        arrival. Returns the checks and the direct path's runs."""
        cond = Condition(CERT_INTERVAL_MS, CERT_FRAME_BYTES, env.link, env.tls, http_version=version)
        runs, rows = self._certification_rows(env, BASE_CONTROLS, cond)
        over = " (HTTP/2)" if version is HttpVersion.HTTP2 else ""
        checks = [
            _check(
                f"direct streams cleanly{over}", rows["direct"], lambda r: (r.fpr_median or 99) <= CERT_MAX_DIRECT_FPR
            ),
            # One late write among the certification runs is what the exclusion rule is for on a shared host;
            # the instrument is untrustworthy when the stub misses its schedule in most runs.
            _check(f"direct's stub audits pass{over}", rows["direct"], lambda r: r.excluded <= r.runs // 3),
            _check(f"buffer relay seen (one arrival){over}", rows["buffer"], lambda r: (r.arrivals_median or 0) == 1),
            _check(f"cork relay seen (bursts, late){over}", rows["cork"], _corked),
        ]
        if version is not HttpVersion.HTTP2:
            checks.insert(2, _check("pass relay within the floor", rows["pass"], lambda r: bool(r.within_floor)))
        else:
            # The pass relay is the same byte relay whatever the protocol: what it adds is certified over HTTP/1.1 in
            # the same run. Over HTTP/2 what must hold is that the instrument sees the controls' effects; a pass
            # row within a 3-run floor only re-measures this host's scheduling (+3.9 ms once, under load, in CI).
            # And the rows must have been read over HTTP/2, not fallen back.
            spoke = {r.metrics.http_version for rs in runs.values() for r in rs if r.metrics is not None}
            checks.append(
                Check(f"probes spoke HTTP/2{over}", spoke == {HttpVersion.HTTP2}, f"versions seen: {sorted(spoke)}")
            )
        return checks, runs["direct"]

    def _certify_compression(self, env: Environment) -> list[Check]:
        """Before a condition that asks for a Content-Encoding: the client decodes (both controls answer gzip), sees
        gzip-hold hold the stream (one arrival or bursts, late) and gzip-flush stream within the direct floor."""
        cond = Condition(CERT_INTERVAL_MS, CERT_FRAME_BYTES, env.link, env.tls, accept_encoding=CERT_ACCEPT_ENCODING)
        _, rows = self._certification_rows(env, COMPRESSION_CONTROLS, cond)
        return [
            _check("gzip-hold relay seen (held: bursts, late; decoded gzip)", rows["gzip-hold"], _gzip_held),
            _check(
                "gzip-flush relay within the floor (decoded gzip)",
                rows["gzip-flush"],
                lambda r: r.content_encoding == "gzip" and bool(r.within_floor),
            ),
        ]

    def _certify_format(self, env: Environment, api: Api) -> Check:
        """Before a condition in another format than OpenAI's: the direct path streams cleanly in it. A format
        writes some events together (Anthropic's message_start, content_block_start and ping), so clean is: every
        write the stub made at its own moment arrived in its own read, the frames are the writes, and the first
        content was found (TTFT), in most runs."""
        # In the format's own transport: a WebSocket-only API (Realtime) has no SSE stream to certify.
        cond = Condition(CERT_INTERVAL_MS, 0, env.link, env.tls, api=api, transport=transport_for(api))
        runs = [r for _ in range(CERT_RUNS) for r in self._round(env, [("direct", env.stub_url)], cond, CERT_FRAMES)]
        row = build_row(PathSpec("direct"), cond, runs, Floor.from_direct(runs))
        clean = [
            r.metrics.arrivals >= _write_groups(r.writes_ms, SAME_MOMENT_MS)
            and r.metrics.frames == len(r.writes_ms)
            and r.metrics.ttft_ms is not None
            for r in runs
            if r.included and r.metrics is not None
        ]
        check = _check(f"direct streams cleanly in {api.value}", row, lambda r: 2 * sum(clean) > len(runs))
        return replace(check, evidence=f"{sum(clean)}/{len(runs)} runs clean; {check.evidence}")

    def _condition(self, env: Environment, cond: Condition, tick: Callable[[str], None]) -> None:
        paths = []
        endpoint = self.exp.endpoint
        for spec in self.exp.paths:
            running = env.running.get(spec.label)
            if spec.proxy == "direct":
                paths.append((spec, endpoint.url if endpoint else _direct_url(env, cond)))
            elif running is not None and self._skips_http(spec, running, env, cond):
                continue
            elif running is not None and endpoint is not None:
                # A proxy with its own API prefix (a gateway's base_path) takes the chat path under it.
                origin = _origin(running)
                base = origin + running.proxy.base_path + "/chat/completions" if running.proxy.base_path else None
                paths.append((spec, base or endpoint.via(origin)))
            elif running is not None:
                paths.append((spec, _origin(running) + running.proxy.base_path))
        runs: dict[str, list[RunRecord]] = {spec.label: [] for spec, _ in paths}
        dead: set[str] = set()
        self._pairings = {}
        if endpoint is not None and endpoint.kind and paths:
            # Unmeasured: a started origin's first stream of a prompt processes it (then cached): 1966 ms to the
            # first token against 21 ms for the next, measured on llama-server; every round would pair against it.
            self._endpoint_probe(env, endpoint.url, "direct", cond=cond)
        try:
            for run in range(self.exp.runs):
                step = f"{cond.label}, run {run + 1}/{self.exp.runs}"
                live = [(spec.label, url) for spec, url in paths if spec.label not in dead]
                if endpoint is not None:
                    records = self._endpoint_round(env, live, cond)
                else:
                    records = self._round(env, live, cond, self.exp.frames)
                for record in records:
                    runs[record.path].append(record)
                    tick(f"{step}, {record.path}")
                    running = env.running.get(record.path)
                    if record.error and running is not None and not running.alive:
                        record.error += f" (proxy exited: {running.log_tail(3)})"
                        dead.add(record.path)
                for label in dead:
                    tick(f"{step}, {label} (exited)")
            if endpoint is None:
                live_paths = {spec.label: (spec, url) for spec, url in paths if spec.label not in dead}
                self._settle(env, live_paths, runs, cond, self.exp.frames, tick)
        finally:
            direct_runs = runs.get("direct", [])
            floor = Floor.from_direct_endpoint(direct_runs) if endpoint else Floor.from_direct(direct_runs)
            self.floors.append(FloorEntry(cond, **(floor.to_json() if floor else {})))
            directs = [r.metrics for r in direct_runs if r.metrics is not None]
            for spec, _ in paths:
                if runs[spec.label]:
                    row = build_row(spec, cond, runs[spec.label], floor)
                    if spec.label in self._pairings:  # a started origin's: the pairs are the row's figures too
                        row = replace(row, pairing=paired(directs, self._pairings[spec.label]))
                    self.rows.append(row)
            if endpoint is not None and endpoint.kind:
                for line in summary(directs, self._pairings):
                    self.console.print(f"{cond.label}: {line}", markup=False, highlight=False)
            self.write()

    def _skips_http(self, spec: PathSpec, running: RunningProxy, env: Environment, cond: Condition) -> bool:
        """A path that cannot speak the condition's HTTP version to the client is skipped in it, with its reason
        (counted like any skip): a client that fell back to HTTP/1.1 would measure something else under the label."""
        if isinstance(running.proxy, CustomProxy | AttachedProxy):
            return False  # the user's own path: it speaks what they say, and a stream that is not h2 fails loudly
        reason = client_version_unsupported(running.proxy, running.site.variant, env.tls, cond.http_version)
        if not reason:
            return False
        where = f"{spec.label} ({cond.label})"
        if all(s.path != where for s in self.skipped):
            self.console.print(f"{styled(f'skipping {where}:', 'yellow')} {escaped(reason)}")
            self.skipped.append(PathSkip(where, reason))
        return True


def _corked(row: MatrixRow) -> bool:
    """The cork control as certification must see it: bursts, and the first token at least half its hold late."""
    return (row.fpr_median or 0) >= 2 and (row.added_ttft_ms_median or 0) >= CORK_MS / 2


def _held(row: MatrixRow) -> bool:
    """A holding control as certification must see it: one arrival or bursts, and the first token late."""
    held = (row.arrivals_median or 0) <= 1 or (row.fpr_median or 0) >= 2
    return held and (row.added_ttft_ms_median or 0) >= CERT_STREAM_MS / 2


def _direct_url(env: Environment, cond: Condition) -> str:
    """The direct path: the stub; over HTTP/3, which it does not speak, Caddy 2.11's clean h3 site in front of it."""
    return env.controls[H3_DIRECT].url if cond.http_version is HttpVersion.HTTP3 else env.stub_url


def _stream(env: Environment, cfg: ProbeConfig, stream_id: str) -> Trace:
    """One probe over the environment's TCP connector; over HTTP/3 without it (the h3 client's own UDP socket)."""
    if cfg.http_version is HttpVersion.HTTP3:
        return probe_stream(cfg, stream_id=stream_id)
    return probe_stream(cfg, stream_id=stream_id, connect=env.connector())


def _gzip_held(row: MatrixRow) -> bool:
    """The gzip-hold control, decoded, as held: one arrival or bursts, and late."""
    return row.content_encoding == "gzip" and _held(row)


def _write_groups(writes_ms: list[float] | tuple[float, ...], gap_ms: float) -> int:
    """The stub's writes made at their own moment: a write less than `gap_ms` after the one before joins its group
    (a format's events written together may arrive in one read, and that is not a path's doing)."""
    return sum(1 for i, t in enumerate(writes_ms) if i == 0 or t - writes_ms[i - 1] >= gap_ms)


def _origin(running: RunningProxy) -> str:
    """Where its streams go: an attached path's declared URL (https for a TLS ingress), else the started proxy's."""
    return running.proxy.url if isinstance(running.proxy, AttachedProxy) else running.origin


def _client_tls(env: Environment, running: RunningProxy | None) -> TLSOptions:
    """The probe's TLS to a path: an attached https path is checked against its own `cacert` (None: the system's
    store); every other path in a TLS condition is checked against this run's own certificate."""
    if running is not None and isinstance(running.proxy, AttachedProxy) and running.proxy.https:
        return TLSOptions(cacert=running.proxy.cacert)
    return TLSOptions(cacert=env.cacert)


def emitter_drift(records: list[RunRecord]) -> Drift:
    """The stub's pacing drift over every write of these streams: what "certified at 0.22 ms" means."""
    drifts = sorted(d for r in records for d in r.drift_ms)
    if not drifts:
        return Drift(writes=0)
    return Drift(len(drifts), percentile(drifts, 50), percentile(drifts, 99), drifts[-1])


def _check(name: str, row: MatrixRow, ok: Callable[[MatrixRow], bool]) -> Check:
    evidence = (
        f"fpr {row.fpr_median or 0:.2f}, added TTFT {row.added_ttft_ms_median or 0:.1f} ms, "
        f"{row.kept}/{row.runs} runs kept"
    )
    return Check(name, bool(row.fpr_median is not None and ok(row)), evidence)
