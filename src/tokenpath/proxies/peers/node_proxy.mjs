// The streaming proxy in the shape the first seed article calls correct: fetch to the upstream, write the head
// at once (flushHeaders), then `for await` over the body and `res.write` each chunk. Plain Node 20, no packages.
//   node node_proxy.mjs --listen 127.0.0.1:8081 --upstream http://127.0.0.1:8000 [--naive] [--workers N]
// --naive is the shape the article measured losing half a second: `await response.text()`, then write it all.
// --workers N runs it under node:cluster with N worker processes sharing the port (the article's "cluster x 4").
// --body-timeout MS / --headers-timeout MS: fetch's (undici's) limits on the upstream response, a silence between
// two body reads and the wait for the head; undici's defaults are 300 s each (its Client docs), 0 turns one off.
// Node's fetch takes them from undici's global dispatcher, which undici shares through a global symbol
// (nodejs/undici#1373): replaced here by an Agent with these limits, as `setGlobalDispatcher` would.
import cluster from "node:cluster";
import http from "node:http";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    listen: { type: "string", default: "127.0.0.1:8081" },
    upstream: { type: "string", default: "http://127.0.0.1:8000" },
    naive: { type: "boolean", default: false },
    workers: { type: "string", default: "1" },
    "body-timeout": { type: "string" },
    "headers-timeout": { type: "string" },
  },
});
const workers = Number(args.workers);
if (workers > 1 && cluster.isPrimary) {
  for (let i = 0; i < workers; i++) cluster.fork();
  cluster.on("exit", (worker, code) => {
    console.error(`node proxy: worker ${worker.process.pid} exited (${code}); stopping`);
    process.exit(1); // a dead worker is a broken measurement, not something to paper over with a restart
  });
  console.log(`node proxy: primary ${process.pid}, ${workers} workers, listening on http://${args.listen}`);
} else {
  serve();
}

async function setFetchTimeouts() {
  if (args["body-timeout"] === undefined && args["headers-timeout"] === undefined) return;
  const DISPATCHER = Symbol.for("undici.globalDispatcher.1");
  await fetch("data:,"); // loads Node's bundled undici, which sets its global dispatcher (an Agent)
  const Agent = globalThis[DISPATCHER].constructor;
  const limits = {};
  if (args["body-timeout"] !== undefined) limits.bodyTimeout = Number(args["body-timeout"]);
  if (args["headers-timeout"] !== undefined) limits.headersTimeout = Number(args["headers-timeout"]);
  globalThis[DISPATCHER] = new Agent(limits);
}

async function serve() {
  await setFetchTimeouts();
  const sep = args.listen.lastIndexOf(":");
  const host = args.listen.slice(0, sep);
  const port = Number(args.listen.slice(sep + 1));
  const HOP_BY_HOP = new Set(["connection", "keep-alive", "transfer-encoding", "content-length", "host"]);

  function forwardHeaders(headers) {
    const out = {};
    for (const [k, v] of Object.entries(headers)) if (!HOP_BY_HOP.has(k)) out[k] = v;
    return out;
  }

  async function readBody(req) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    return Buffer.concat(chunks);
  }

  const server = http.createServer(async (req, res) => {
    const abort = new AbortController();
    res.on("close", () => abort.abort()); // client gone: stop the upstream too
    try {
      const body = req.method === "GET" || req.method === "HEAD" ? undefined : await readBody(req);
      const upstream = await fetch(args.upstream + req.url, {
        method: req.method,
        headers: forwardHeaders(req.headers),
        body,
        signal: abort.signal,
      });
      const headers = {};
      upstream.headers.forEach((v, k) => {
        if (!HOP_BY_HOP.has(k)) headers[k] = v;
      });
      if (args.naive) {
        const text = await upstream.text(); // the whole generation, then everything at once
        res.writeHead(upstream.status, headers);
        res.end(text);
        return;
      }
      res.writeHead(upstream.status, headers);
      res.flushHeaders();
      for await (const chunk of upstream.body) res.write(chunk); // ServerResponse does not buffer across writes
      res.end();
    } catch (err) {
      if (!res.headersSent) {
        res.writeHead(502, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: `upstream failed: ${err.message}`, type: "bad_gateway" } }));
      } else {
        res.destroy(err);
      }
    }
  });
  server.keepAliveTimeout = 65_000;
  server.listen(port, host, () => console.log(`node proxy${args.naive ? " (naive)" : ""}: listening on http://${host}:${port}`));
}
