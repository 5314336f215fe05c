"""The gateway's configuration: a TOML file, or quick flags that build the same objects. Every limit is named,
has a default with its reason, and is checked on load with a message that says where the problem is."""

from __future__ import annotations

import ipaddress
import math
import os
import re
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, get_type_hints
from urllib.parse import urlsplit

from tokenpath.errors import UsageError
from tokenpath.gateway.headers import FORWARD_DROP
from tokenpath.gateway.streamformat import CREDENTIAL_HEADERS
from tokenpath.gateway.tls import check_files
from tokenpath.hostport import join_hostport, parse_hostport, redacted, url_host
from tokenpath.tomlconfig import dataclass_from
from tokenpath.tomlconfig import read_toml as _read_toml
from tokenpath.wire.limits import MAX_HEAD_BYTES, WRITE_BUFFER_HIGH
from tokenpath.wire.request import VISIBLE_ASCII, check_key

Strategy = Literal["round_robin", "least_outstanding", "p2c_ewma"]
STRATEGIES = ("round_robin", "least_outstanding", "p2c_ewma")
ALGORITHMS = (
    "HS256",
    "HS384",
    "HS512",
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "EdDSA",
)


@dataclass(frozen=True)
class Limits:
    connect_timeout_s: float = 5.0  # a healthy upstream on a LAN accepts in ms; beyond this, fail over
    # Request sent to the upstream's response head; past it, the next member is tried (so it is also how long a hung
    # member holds a request before failover: kept at 60 s). A server that sends its head as it accepts the request
    # (vLLM's OpenAI server: a Starlette StreamingResponse starts before its first chunk) answers in ms however long
    # the model thinks; one that holds its head until its first token (Ollama writes it with its first line, some
    # gateways do) needs this above its longest prompt processing plus thinking, or every long think fails over.
    first_byte_timeout_s: float = 60.0
    # Silence between two upstream reads once the head is in, before the first body byte too. A reasoning model whose
    # thinking is not streamed is silent there for minutes: 60 s (nginx's proxy_read_timeout, this default until
    # issue 36) cut it, and with keep-alives on (below) the path in front no longer does, so the gateway's own limit
    # must not either. 5 minutes: above minutes of thinking, below the 10-minute read timeout of the openai and
    # anthropic SDKs (httpx's, between two reads), so a client of a format without keep-alives gets the gateway's
    # error frame rather than its own timeout. A member hung mid-stream (no failover after the head) holds one stream
    # slot that long.
    idle_timeout_s: float = 300.0
    total_timeout_s: float = 900.0  # one response, start to end: minutes of thinking plus a long answer, bounded
    # While an upstream is silent this long after the head, the client gets the format's own keep-alive (an SSE
    # comment line; Anthropic's `ping` event; none for Gemini, Bedrock and Ollama: each ApiSpec.keepalive says why),
    # so an idle timer in front of the gateway does not cut a long think. Idle timers in front, as documented: AWS
    # ALB 60 s, nginx's proxy_read_timeout 60 s (ingress-nginx's too), Cloudflare's proxy read timeout 100-125 s;
    # 15 s (sse-starlette's ping period) resets each of them three times or more, so one late keep-alive costs
    # nothing. A timer that counts the whole response (GCP's backend service timeout, 30 s, on its external
    # Application Load Balancer) is lifted by no keep-alive: only by raising it. On by default: a comment line is
    # ignored by every conforming SSE parser and `ping` is part of Anthropic's documented stream, a stream that
    # produces tokens never gets one, and a silent one gets 14 bytes per interval. 0 turns it off.
    keepalive_interval_s: float = 15.0
    max_body_bytes: int = 8 << 20  # a long chat history with images as URLs fits; a runaway upload does not
    # Request bodies a worker holds at once (each is kept whole until its stream ends, for failover): 16 bodies of
    # max_body_bytes, or max_streams of 64 KiB (a ~16k-token chat history). Thirty authenticated 8 MiB uploads
    # held 522 MB before this; past it, 503 + Retry-After on the head (a chunked body counts as max_body_bytes).
    max_body_bytes_in_flight: int = 128 << 20
    max_head_bytes: int = MAX_HEAD_BYTES
    header_timeout_s: float = 10.0  # a whole request head and body (slowloris); also the keep-alive idle time
    max_streams: int = 2000  # per worker: beyond this, 503 + Retry-After rather than a slower everyone
    write_buffer_bytes: int = WRITE_BUFFER_HIGH  # per client: a slow reader pauses the upstream instead of growing RSS
    drain_s: float = 30.0  # on SIGTERM, open streams get this long to finish
    # HTTP/2 clients: streams one connection may have open (nginx's http2_max_concurrent_streams); past it a stream
    # is refused (REFUSED_STREAM), which a client retries on another connection
    h2_max_concurrent_streams: int = 128
    retry_after_s: int = 1
    # WebSocket sessions (the Responses WebSocket mode, gateway/wsrelay.py). A client's message is a response.create,
    # a POST body's twin: the stub's 1 MiB. A member's message is one event, and response.completed carries the whole
    # answer: 8 MiB, what the SSE relay holds of one event (wire/sse.py MAX_EVENT_BYTES). Past either, close 1009.
    ws_max_message_bytes: int = 1 << 20
    ws_max_upstream_message_bytes: int = 8 << 20
    ws_max_fragments: int = 1024  # frames in one message, either side (1-byte frames cost a header each) → 1008
    # A client silent this long is pinged (the member too: its own idle timer, the stub's 60 s, sees only what the
    # gateway forwards, and client pings are answered here); no pong within ws_pong_timeout_s → close 1001. Under
    # the 60 s idle timers in front (ALB, nginx's proxy_read_timeout) as keepalive_interval_s is.
    ws_ping_interval_s: float = 30.0
    ws_pong_timeout_s: float = 15.0
    ws_ping_burst: int = 100  # a client's pings answered at once, then ws_pings_per_s: past them close 1008 ...
    ws_pings_per_s: float = 10.0  # ... (pongs owed are capped, never queued behind a slow reader)
    # One WebSocket session's whole life, from its 101: past it, closed 1001 both sides with a reason. Off (0) by
    # default, as HTTP streams have no such limit: a session carries many responses, each as long as the model takes,
    # and a client gone silently is already ended by the ping limits above.
    ws_session_s: float = 0.0


@dataclass(frozen=True)
class AuthConfig:
    mode: Literal["jwt", "none"] = "jwt"
    algorithms: tuple[str, ...] = ()
    secret_env: str | None = None
    public_key_file: str | None = None
    jwks_url: str | None = None
    jwks_ttl_s: float = 300.0  # keys rotate in hours; five minutes bounds how long a revoked key is trusted
    jwks_min_refresh_s: float = 10.0  # an unknown kid triggers at most one fetch per this interval
    audience: str | None = None
    issuer: str | None = None
    # Clock skew between the issuer and this host, added to `exp` (and taken off `nbf`): NUMBER_RULES bounds it at
    # 5 minutes, as a skew of synced clocks is seconds; more is a token trusted after it expired, not a clock.
    leeway_s: float = 30.0
    pool_claim: str | None = None  # a claim whose value picks the pool (e.g. "tier")


# AuthConfig's fields that only a JWT mode reads.
JWT_ONLY = ("algorithms", "secret_env", "public_key_file", "jwks_url", "audience", "issuer", "pool_claim", "leeway_s",
            "jwks_ttl_s", "jwks_min_refresh_s")  # fmt: skip
JWKS_ONLY = ("jwks_ttl_s", "jwks_min_refresh_s")  # read only when a key set is fetched (jwks_url)


@dataclass(frozen=True)
class Member:
    """A member of a pool. What its URL says is worked out once per member (cached_property writes the instance's
    own dict, which a frozen dataclass allows), not once per request: the request path reads `authority` and
    `base_path` for every request it sends."""

    url: str
    weight: int = 1

    @cached_property
    def host(self) -> str:
        host = urlsplit(self.url).hostname
        assert host is not None
        return host

    @cached_property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @cached_property
    def base_path(self) -> str:
        return urlsplit(self.url).path.rstrip("/")

    @cached_property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "https"

    @cached_property
    def authority(self) -> str:
        """What goes in the Host header: the port only when it is not the scheme's default."""
        return url_host(self.host) if urlsplit(self.url).port is None else join_hostport(self.host, self.port)


@dataclass(frozen=True)
class PoolConfig:
    name: str
    members: tuple[Member, ...]
    strategy: Strategy = "round_robin"
    models: tuple[str, ...] = ("*",)  # fnmatch patterns of the request's model
    # Values of auth.pool_claim this pool serves, and only them: a token naming one is routed here first, and a
    # pool that lists any serves no other token (not by its models, not as the catch-all: gateway/pools.py Router).
    claims: tuple[str, ...] = ()
    api_key_env: str | None = None  # sent upstream as the Bearer token; the client's token never is
    protocol: Literal["http1", "h2"] = "http1"  # h2: multiplexed, ALPN over TLS, prior knowledge in clear text
    ca_file: str | None = None  # https members: verify against this CA bundle instead of the system store
    client_cert: str | None = None  # https members: present this certificate (mTLS) ...
    client_key: str | None = None  # ... with this key (omit when the key is inside client_cert)


@dataclass(frozen=True)
class HealthConfig:
    eject_after: int = 3  # consecutive connect errors / 5xx before a member is taken out
    cooldown_s: float = 10.0  # how long it stays out before it gets traffic again
    active_interval_s: float = 0.0  # 0: passive only; else GET active_path on each member this often
    active_path: str = "/v1/models"


@dataclass(frozen=True)
class Written:
    """The keys a config file wrote, per table (the command line's flags are made into one: Overrides.apply). A
    key written is a setting its user expects read, at its default value too, as a flag typed is (cli/common.py
    refuse_unread). Built in Python (no file), a config has none: then a key counts as set away from its default."""

    auth: frozenset[str] = frozenset()
    health: frozenset[str] = frozenset()
    pools: tuple[frozenset[str], ...] = ()
    limits: frozenset[str] = frozenset()

    def pool(self, i: int) -> frozenset[str]:
        return self.pools[i] if i < len(self.pools) else frozenset()


def is_set(table: object, key: str, written: frozenset[str]) -> bool:
    """`key` of a config table (a dataclass instance) is a setting: written in the file, or away from its default."""
    return key in written or getattr(table, key) != getattr(type(table), key)


@dataclass(frozen=True)
class Rule:
    """What one numeric key takes: a whole number (`whole`) or any number, finite (never a bool), from `low` (or above
    it, `above`) to `high`; `off`: 0 is taken too, and means this."""

    whole: bool
    low: float
    high: float
    unit: str = ""
    above: bool = False
    off: str | None = None

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        unit = f" of {self.unit}" if self.unit else ""
        low = f"> {_number(self.low)}" if self.above else f">= {_number(self.low)}"
        off = f" (0: {self.off})" if self.off else ""
        return f"{kind}{unit} {low} and <= {_number(self.high)}{off}"

    def takes(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if self.whole else int | float):
            return False
        if not math.isfinite(value):
            return False
        if self.off is not None and value == 0:
            return True
        return (value > self.low if self.above else value >= self.low) and value <= self.high


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


SECONDS, BYTES = "seconds", "bytes"
DAY_S = 86400.0
MAX_BYTES = float(1 << 40)  # 1 TiB: past any host's memory, so a larger value is a typo, not a setting
COUNT = 1_000_000.0  # streams, frames, pings, failures: past a million, a typo


def _timeout(high: float = DAY_S) -> Rule:
    return Rule(False, 0, high, SECONDS, above=True)


# Every numeric key of every table, and what it takes: the one place its range is declared (GatewayConfig.validate
# applies them all, tests/gateway/test_config.py walks every key with a bad value, so a key added without a rule here
# fails that test). The table "" is the file's top level; "member" a pool's [[pool.member]].
NUMBER_RULES: dict[str, dict[str, Rule]] = {
    "": {
        "listen_port": Rule(True, 0, 65535),  # 0: a port the system picks
        "metrics_port": Rule(True, 0, 65535),
        "workers": Rule(True, 1, 1024),  # processes: more than a host's cores only contend
    },
    "auth": {
        # One fetch of the key set per this long at least (validate: jwks_ttl_s >= jwks_min_refresh_s), however many
        # unknown kids unauthenticated clients send; a day at most, so a revoked key is not trusted for longer.
        "jwks_ttl_s": _timeout(DAY_S),
        "jwks_min_refresh_s": Rule(False, 1, DAY_S, SECONDS),
        # Clock skew, which is seconds between synced clocks and minutes at most: 5 minutes (Kerberos' own default
        # skew) bounds how long after its `exp` a token is still taken.
        "leeway_s": Rule(False, 0, 300, SECONDS),
    },
    "limits": {
        "connect_timeout_s": _timeout(3600),
        "first_byte_timeout_s": _timeout(),
        "idle_timeout_s": _timeout(),
        "total_timeout_s": _timeout(),
        "keepalive_interval_s": Rule(False, 0, 3600, SECONDS, off="no keep-alives"),
        "max_body_bytes": Rule(True, 1, MAX_BYTES, BYTES),
        "max_body_bytes_in_flight": Rule(True, 1, MAX_BYTES, BYTES),
        "max_head_bytes": Rule(True, 1024, 1 << 20, BYTES),  # a request line and its headers
        "header_timeout_s": _timeout(3600),
        "max_streams": Rule(True, 1, COUNT),
        "write_buffer_bytes": Rule(True, 1024, 1 << 30, BYTES),
        "drain_s": Rule(False, 0, DAY_S, SECONDS),  # 0: open streams are cut at once
        "h2_max_concurrent_streams": Rule(True, 1, 2**31 - 1),  # SETTINGS_MAX_CONCURRENT_STREAMS is 31 bits
        "retry_after_s": Rule(True, 0, 3600, SECONDS),
        "ws_max_message_bytes": Rule(True, 1, MAX_BYTES, BYTES),
        "ws_max_upstream_message_bytes": Rule(True, 1, MAX_BYTES, BYTES),
        "ws_max_fragments": Rule(True, 1, COUNT),
        "ws_ping_interval_s": _timeout(),
        "ws_pong_timeout_s": _timeout(),
        "ws_ping_burst": Rule(True, 1, COUNT),
        "ws_pings_per_s": Rule(False, 0, COUNT, above=True),
        "ws_session_s": Rule(False, 0, 7 * DAY_S, SECONDS, off="no limit"),
    },
    "health": {
        "eject_after": Rule(True, 1, COUNT),
        "cooldown_s": _timeout(),
        "active_interval_s": Rule(False, 0.1, DAY_S, SECONDS, off="passive checks only"),
    },
    "member": {
        # The smooth round robin holds one ring entry per unit of weight (gateway/pools.py): 2e6 took 1.2 s to
        # build and more ran out of memory; a ratio finer than 1:1000 between members means nothing to a pool.
        "weight": Rule(True, 1, 1000),
    },
}


def numeric_keys(cls: type) -> dict[str, bool]:
    """The keys of a config dataclass that hold a number (int or float), each with whether None is taken too."""
    hints = get_type_hints(cls)
    keys = {}
    for f in fields(cls):
        hint = hints[f.name]
        if hint in (int, float):
            keys[f.name] = False
        elif hint in (int | None, float | None):
            keys[f.name] = True
    return keys


def check_numbers(table: str, obj: object, where: str) -> None:
    """Each numeric key of `obj` (a config dataclass) against NUMBER_RULES[table]. `where` starts the message."""
    rules = NUMBER_RULES[table]
    for key, optional in numeric_keys(type(obj)).items():
        value = getattr(obj, key)
        if value is None and optional:
            continue
        rule = rules[key]  # a KeyError here is a key added without its rule (the tests walk every key)
        if not rule.takes(value):
            raise UsageError(f"{where}`{key}` must be {rule.describe()}, not {value!r}")


# RFC 9110 5.6.2: a header name is a token, one or more tchar
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
# An environment variable's name as shells and systemd's Environment= write them: a value that is not one is most
# likely the secret itself, given where its name goes (refused without being shown).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_env_name(what: str, name: object) -> None:
    """`name` names an environment variable; the message never shows a value that does not (it may be the secret)."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise UsageError(
            f"{what}: not an environment variable's name (letters, digits and _, not first a digit); give the name "
            "of the variable that holds the secret, never the secret itself (the value given is not shown)"
        )


# Names the request id may not take: hop-by-hop and framing (dropped and rewritten per hop), the credentials (the
# client's token, the pool's key), the forwarding chain and cookies: the gateway writes the request id's header on
# the upstream request and on the client's response, over whatever that header carried.
NOT_A_REQUEST_ID = (
    FORWARD_DROP
    | CREDENTIAL_HEADERS
    | {
        "cookie",
        "set-cookie",
        "forwarded",
        "x-forwarded-host",
        "content-type",
        "content-encoding",
        "www-authenticate",
        "proxy-authenticate",
        "location",
    }
)
LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class GatewayConfig:
    pools: tuple[PoolConfig, ...]
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    workers: int = 1
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None  # None: no metrics endpoint
    auth: AuthConfig = field(default_factory=AuthConfig)
    limits: Limits = field(default_factory=Limits)
    health: HealthConfig = field(default_factory=HealthConfig)
    request_id_header: str = "X-Request-Id"
    tls_cert: str | None = None  # PEM certificate (chain): the listener speaks TLS, HTTP/1.1 and h2 by ALPN
    tls_key: str | None = None  # its PEM private key (unencrypted; never printed or logged)
    written: Written = field(default_factory=Written, compare=False, repr=False)  # what from_dict's file wrote

    def validate(self) -> GatewayConfig:
        if not self.pools:
            raise UsageError("no pool: give `upstreams` or a [[pool]] in the config")
        check_numbers("", self, "gateway config: ")
        for key in ("listen_host", "metrics_host"):
            if not isinstance(getattr(self, key), str):
                raise UsageError(f"gateway config: `{key}` must be a string, not {getattr(self, key)!r}")
        for key in ("tls_cert", "tls_key"):
            if not isinstance(getattr(self, key), str | None):
                raise UsageError(f"gateway config: `{key}` must be a string (a file), not {getattr(self, key)!r}")
        check_request_id_header(self.request_id_header)
        check_numbers("auth", self.auth, "auth: ")
        check_numbers("limits", self.limits, "limits: ")
        check_numbers("health", self.health, "health: ")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise UsageError(f"pool names must be unique: {names}")
        for pool in self.pools:
            if pool.api_key_env is not None:
                check_env_name(f"pool {pool.name!r}: `api_key_env`", pool.api_key_env)
            if not pool.members:
                raise UsageError(f"pool {pool.name!r} has no member")
            if pool.strategy not in STRATEGIES:
                raise UsageError(f"pool {pool.name!r}: strategy {pool.strategy!r}; expected {STRATEGIES}")
            if pool.protocol not in ("http1", "h2"):
                raise UsageError(f"pool {pool.name!r}: protocol {pool.protocol!r}; expected http1 or h2")
            if pool.client_key and not pool.client_cert:
                raise UsageError(f"pool {pool.name!r}: client_key without client_cert")
            missing = check_files(pool.ca_file, pool.client_cert, pool.client_key)
            if missing:
                raise UsageError(f"pool {pool.name!r}: no such file: {', '.join(missing)}")
            for m in pool.members:
                check_member_url(pool.name, m.url)
                check_numbers("member", m, f"pool {pool.name!r}: member {m.url!r}: ")
        for i, pool in enumerate(self.pools):  # settings a pool would never use: refused, not kept and ignored
            written = self.written.pool(i)
            tls_only = [f"`{k}`" for k in ("ca_file", "client_cert", "client_key") if getattr(pool, k)]
            if tls_only and not any(m.tls for m in pool.members):
                raise UsageError(f"pool {pool.name!r}: {', '.join(tls_only)} with no https member: never used")
            # `claims` on the only pool are read: they say which tokens it serves (the others are refused, 403)
            if len(self.pools) == 1 and is_set(pool, "models", written):
                raise UsageError(
                    f"pool {pool.name!r}: `models` with one pool: every request goes to it whatever its model "
                    "(patterns pick between pools, they refuse nothing): never read"
                )
            # The first pool whose patterns match a model takes it (gateway/pools.py Router), and a pool that says
            # no `models` matches every one: the patterns of a pool after such a pool are never tried. A pool with
            # `claims` takes only its own tokens, so it is no catch-all for the pools after it.
            catch_all = next((p for p in self.pools[:i] if "*" in p.models and not p.claims), None)
            if catch_all is not None and is_set(pool, "models", written):
                raise UsageError(
                    f"pool {pool.name!r}: `models` after pool {catch_all.name!r}, whose patterns (`*`) take every "
                    "model first: never read (put the catch-all pool last)"
                )
            if pool.claims and self.auth.pool_claim is None:
                raise UsageError(
                    f"pool {pool.name!r}: `claims` without auth `pool_claim` (or with no authentication, "
                    "`no_auth`): no token picks it by them"
                )
        if is_set(self.health, "active_path", self.written.health) and not self.health.active_interval_s:
            raise UsageError("health `active_path` with `active_interval_s` 0 (passive checks only): never requested")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise UsageError("TLS needs both tls_cert and tls_key (--tls-cert, --tls-key)")
        missing = check_files(self.tls_cert, self.tls_key)
        if missing:
            raise UsageError(f"no such file: {', '.join(missing)}")
        check_keepalive(self.limits, given="keepalive_interval_s" in self.written.limits)
        if self.limits.max_body_bytes_in_flight < self.limits.max_body_bytes:
            raise UsageError(
                "limits: max_body_bytes_in_flight must be >= max_body_bytes (else a body that size "
                "could never be admitted)"
            )
        a = self.auth
        if a.secret_env is not None:
            check_env_name("auth: `secret_env`", a.secret_env)
        if a.mode == "jwt":
            sources = [s for s in (a.secret_env, a.public_key_file, a.jwks_url) if s]
            if len(sources) != 1:
                raise UsageError(
                    "JWT auth needs exactly one key source (`secret_env`, `public_key_file` or `jwks_url`), or "
                    "`no_auth` to run without authentication"
                )
            bad = [alg for alg in a.algorithms if alg not in ALGORITHMS]
            if bad or not a.algorithms:
                raise UsageError(f"auth algorithms {list(a.algorithms)}: choose from {ALGORITHMS}")
            hmac = {alg for alg in a.algorithms if alg.startswith("HS")}
            if hmac and not a.secret_env:
                raise UsageError(
                    "HS* algorithms need a shared secret (secret_env); with a public key or "
                    "JWKS they would open the door to algorithm confusion"
                )
            if a.secret_env and set(a.algorithms) - hmac:
                raise UsageError("a shared secret only verifies HS256/384/512")
            for key in ("audience", "issuer"):
                value = getattr(a, key)
                if value is not None and not (isinstance(value, str) and value.strip()):
                    raise UsageError(
                        f"auth: `{key}` {value!r}: an empty {key} matches no token (every one refused); name it, "
                        "or leave the key out to check no " + ("`aud`" if key == "audience" else "`iss`")
                    )
            if a.jwks_url:
                check_jwks_url(a.jwks_url)
                if a.jwks_ttl_s < a.jwks_min_refresh_s:
                    raise UsageError(
                        f"auth: `jwks_ttl_s` ({a.jwks_ttl_s:g}) must be >= `jwks_min_refresh_s` "
                        f"({a.jwks_min_refresh_s:g}): the key set is fetched no more often than that"
                    )
            if a.pool_claim is not None and not a.pool_claim.strip():
                raise UsageError('auth `pool_claim` is empty: name the claim whose value picks the pool ("tier")')
            if a.pool_claim and not any(p.claims for p in self.pools):
                raise UsageError(f"auth `pool_claim` {a.pool_claim!r} with no pool's `claims`: it picks no pool")
            fetched_only = [f"`{k}`" for k in JWKS_ONLY if is_set(a, k, self.written.auth)]
            if fetched_only and not a.jwks_url:
                named = ", ".join(fetched_only)
                raise UsageError(f"{named} without `jwks_url`: no key set is fetched, so never applied")
        elif a.mode != "none":
            raise UsageError(f"auth mode {a.mode!r}: expected jwt or none")
        else:  # a JWT setting beside no authentication would be dropped in silence: the user meant one or the other
            unread = [k for k in JWT_ONLY if is_set(a, k, self.written.auth)]
            if unread:
                named = ", ".join(f"`{k}`" for k in unread)
                raise UsageError(f"{named} with auth mode none (no authentication): no token is read, so never applied")
        return self


def check_pool_keys(cfg: GatewayConfig) -> None:
    """Each pool's `api_key_env` is set: it is read for every request, and unset every request would go upstream
    without a key. Checked where the gateway starts (its parent, before any worker) and where an app is made."""
    for pool in cfg.pools:
        if not pool.api_key_env:
            continue
        name = pool.api_key_env
        key = os.environ.get(name)
        if not key:
            raise UsageError(f"pool {pool.name!r}: `api_key_env` {name}: that environment variable is empty")
        check_key(f"pool {pool.name!r}: `api_key_env` {name}", key)  # a bad one: every request a 500, the key logged


def check_keepalive(limits: Limits, given: bool = False) -> None:
    """`given`: the file sets keepalive_interval_s. Then it must be below idle_timeout_s, or it never sends one (the
    idle timeout ends every silence first). The default is not held to that: with an idle limit of 15 s or less the
    gateway is the shortest idle timer on the path already, and its keep-alives have nothing to protect."""
    every = limits.keepalive_interval_s  # a number in its range: NUMBER_RULES, checked first
    if given and every and every >= limits.idle_timeout_s:
        raise UsageError(
            f"limits: keepalive_interval_s ({every:g}) must be below idle_timeout_s ({limits.idle_timeout_s:g}): "
            "the idle timeout would end every silence before its first keep-alive"
        )


def check_member_url(pool: str, url: str) -> None:
    """A member's URL says where to connect and its base path: nothing it would drop or leak."""
    parts = urlsplit(url)
    shown = redacted(url)
    if not VISIBLE_ASCII.match(url):  # urlsplit drops a CR, LF or tab in silence and keeps a space: neither may
        # reach a request line, nor a non-ASCII byte (the head is Latin-1): percent-encode it
        raise UsageError(
            f"pool {pool!r}: member {shown!r}: a space, a control character or a non-ASCII character in a member "
            "URL; percent-encode it in the base path"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"pool {pool!r}: member {shown!r}: expected http(s)://HOST[:PORT][/base]")
    try:
        _ = parts.port
    except ValueError:
        raise UsageError(f"pool {pool!r}: member {shown!r}: the port is not a number") from None
    if "@" in parts.netloc:  # never sent (no Basic auth), and shown in metrics labels, the access log and /health
        raise UsageError(
            f"pool {pool!r}: member {shown!r}: credentials in a member URL (user:password@) are never sent and "
            "would be shown in metrics, logs and /health; give the pool's key in `api_key_env`"
        )
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        raise UsageError(
            f"pool {pool!r}: member {shown!r}: a query or fragment in a member URL is dropped, never sent: give "
            "HOST[:PORT][/base] only (a key goes in the pool's `api_key_env`)"
        )


def check_jwks_url(url: str) -> None:
    """The signing keys come over https: over plain http anyone on the path could substitute them. http is taken to
    a loopback host only (tests, an identity provider on this host)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if "@" in parts.netloc:  # urllib takes user:password@ for part of the host: never sent, and shown in errors
        raise UsageError(
            f"auth: `jwks_url` {redacted(url)!r}: credentials in the URL (user:password@) are never sent; a key set "
            "behind authentication is not supported"
        )
    if parts.scheme == "https" and host:
        return
    if parts.scheme == "http" and host and is_loopback(host):
        return
    raise UsageError(
        f"auth: `jwks_url` {redacted(url)!r}: expected https://HOST/...; http:// is taken only to a loopback host "
        "(127.0.0.0/8, ::1, localhost): over plain http anyone on the path can substitute the signing keys"
    )


def check_request_id_header(name: object) -> None:
    """The request id's header is written on the upstream request and the client's response: a header name (RFC
    9110 token), and none the gateway or the HTTP framing already owns."""
    if not isinstance(name, str) or not TOKEN.match(name) or len(name) > 128:
        raise UsageError(
            f"gateway config: `request_id_header` {name!r}: expected a header name (letters, digits and "
            "!#$%&'*+-.^_`|~, at most 128), such as X-Request-Id"
        )
    if name.lower() in NOT_A_REQUEST_ID:
        raise UsageError(
            f"gateway config: `request_id_header` {name!r}: a hop-by-hop, framing, credential or forwarding "
            "header: the request id would overwrite it; choose another name, such as X-Request-Id"
        )


def default_algorithms(auth: AuthConfig) -> tuple[str, ...]:
    if auth.secret_env:
        return ("HS256", "HS384", "HS512")
    return ("RS256", "PS256", "ES256", "EdDSA")


def _dataclass_from(cls: Any, data: dict[str, Any], where: str) -> Any:
    return dataclass_from(cls, data, f"gateway config [{where}]")


@dataclass(frozen=True, slots=True)
class Overrides:
    """What the command line says on top of a config file: a flag that is set wins over the file's value."""

    listen: str | None = None
    upstreams: tuple[str, ...] = ()  # one pool named "default" replaces the file's pools
    strategy: str = "round_robin"  # of that pool
    metrics_listen: str | None = None
    workers: int | None = None
    no_auth: bool = False
    secret_env: str | None = None
    public_key_file: str | None = None
    jwks_url: str | None = None
    audience: str | None = None
    issuer: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        data = dict(data)
        if self.upstreams:
            members = [{"url": u} for u in self.upstreams]
            data["pool"] = [{"name": "default", "strategy": self.strategy, "member": members}]
        for key in ("listen", "metrics_listen", "workers", "tls_cert", "tls_key"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        raw_auth = data.get("auth")
        auth: dict[str, Any] = dict(raw_auth) if isinstance(raw_auth, dict) else {}
        if self.no_auth:  # the file's [auth] is overridden whole (tests/gateway/test_cli_flags.py); JWT flags beside it
            auth = {"mode": "none"}  # are kept, and refused by validate
        for key in ("secret_env", "public_key_file", "jwks_url", "audience", "issuer"):
            value = getattr(self, key)
            if value is not None:  # an empty one too: validate refuses it, rather than the file's value staying
                auth[key] = value
        data["auth"] = auth
        return data


def read_toml(path: str | Path) -> dict[str, Any]:
    return _read_toml(path, "gateway config")


def load(path: str | Path) -> GatewayConfig:
    return from_dict(read_toml(path))


# The file's top-level keys that are not tables, and the type each takes (their values are checked by validate).
TOP_LEVEL_TYPES: dict[str, type] = {
    "listen": str,
    "metrics_listen": str,
    "workers": int,
    "request_id_header": str,
    "tls_cert": str,
    "tls_key": str,
}


def from_dict(data: dict[str, Any]) -> GatewayConfig:
    data = dict(data)
    for key, kind in TOP_LEVEL_TYPES.items():
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], kind)):
            expected = "a whole number" if kind is int else "a string"
            raise UsageError(f"gateway config: `{key}` must be {expected}, not {data[key]!r}")
    raw_pools = data.get("pool", [])
    if not isinstance(raw_pools, list) or not all(isinstance(raw, dict) for raw in raw_pools):
        raise UsageError("gateway config: `pool` must be an array of tables ([[pool]])")
    kwargs: dict[str, Any] = {}
    if "listen" in data:
        kwargs["listen_host"], kwargs["listen_port"] = parse_hostport(data.pop("listen"), "gateway config listen")
    if "metrics_listen" in data:
        metrics_listen = data.pop("metrics_listen")
        kwargs["metrics_host"], kwargs["metrics_port"] = parse_hostport(metrics_listen, "gateway config metrics_listen")
    for key in ("workers", "request_id_header", "tls_cert", "tls_key"):
        if key in data:
            kwargs[key] = data.pop(key)
    raw_auth, raw_health, raw_limits = data.get("auth", {}), data.get("health", {}), data.get("limits", {})
    written = Written(
        frozenset(raw_auth) if isinstance(raw_auth, dict) else frozenset(),
        frozenset(raw_health) if isinstance(raw_health, dict) else frozenset(),
        tuple(frozenset(raw) for raw in raw_pools),
        frozenset(raw_limits) if isinstance(raw_limits, dict) else frozenset(),
    )
    kwargs["written"] = written
    auth = _dataclass_from(AuthConfig, data.pop("auth", {}), "auth")
    if auth.mode == "jwt" and "algorithms" not in written.auth:  # a written `[]` is refused, not defaulted
        auth = AuthConfig(**{**auth.__dict__, "algorithms": default_algorithms(auth)})
    kwargs["auth"] = auth
    kwargs["limits"] = _dataclass_from(Limits, data.pop("limits", {}), "limits")
    kwargs["health"] = _dataclass_from(HealthConfig, data.pop("health", {}), "health")
    pools = []
    for i, raw in enumerate(data.pop("pool", [])):
        raw = dict(raw)
        raw_members = raw.pop("member", [])
        if not isinstance(raw_members, list):
            raise UsageError(f"gateway config [pool {i}]: `member` must be an array of tables ([[pool.member]])")
        members = tuple(_dataclass_from(Member, m, f"pool {i} member") for m in raw_members)
        pools.append(
            _dataclass_from(PoolConfig, {"name": raw.pop("name", f"pool{i}"), **raw, "members": members}, f"pool {i}")
        )
    kwargs["pools"] = tuple(pools)
    if data:
        raise UsageError(f"gateway config: unknown key(s) {sorted(data)}")
    return GatewayConfig(**kwargs).validate()
