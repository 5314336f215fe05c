// An Express streaming relay in the shape users write it: fetch to the upstream, flushHeaders, then `for await`
// over the body and `res.write` each chunk (one event per upstream write), optionally behind the `compression`
// middleware. express and compression come from npm (scripts/install-proxies --all puts them into the tools folder):
//   node express_proxy.mjs --modules DIR/node_modules --listen 127.0.0.1:8081 --upstream http://127.0.0.1:8000 \
//        [--compression [--flush]]
// --compression   app.use(compression()): gzip into a zlib stream that holds small writes until its buffer fills
// --flush         res.flush() after every res.write (compression's documented fix for server-sent events)
import { createRequire } from "node:module";
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    modules: { type: "string" },
    listen: { type: "string", default: "127.0.0.1:8081" },
    upstream: { type: "string", default: "http://127.0.0.1:8000" },
    compression: { type: "boolean", default: false },
    flush: { type: "boolean", default: false },
  },
});
const require = createRequire(join(args.modules, "tokenpath-peer.cjs")); // resolves from that node_modules
const express = require("express");
const compression = require("compression");

const MAX_BODY = "1mb"; // a chat request is a few KB; larger ones are refused (413), not held
const FORWARD_REQUEST = ["content-type", "authorization", "x-tokenpath-stream"];
const FORWARD_RESPONSE = ["content-type", "cache-control"];

const app = express();
if (args.compression) app.use(compression());
app.use(express.raw({ type: () => true, limit: MAX_BODY }));
app.use(async (req, res) => {
  const abort = new AbortController();
  res.on("close", () => abort.abort()); // client gone: stop the upstream too
  try {
    const headers = {};
    for (const name of FORWARD_REQUEST) if (req.headers[name]) headers[name] = req.headers[name];
    const hasBody = Buffer.isBuffer(req.body) && req.body.length > 0;
    const upstream = await fetch(args.upstream + req.originalUrl, {
      method: req.method,
      headers,
      body: hasBody ? req.body : undefined,
      signal: abort.signal,
    });
    res.status(upstream.status);
    for (const name of FORWARD_RESPONSE) if (upstream.headers.has(name)) res.setHeader(name, upstream.headers.get(name));
    res.flushHeaders();
    for await (const chunk of upstream.body) {
      res.write(chunk);
      if (args.flush) res.flush();
    }
    res.end();
  } catch (err) {
    if (!res.headersSent) res.status(502).json({ error: { message: `upstream failed: ${err.message}`, type: "bad_gateway" } });
    else res.destroy(err);
  }
});

const sep = args.listen.lastIndexOf(":");
const host = args.listen.slice(0, sep).replace(/^\[|\]$/g, "");
const port = Number(args.listen.slice(sep + 1));
const server = app.listen(port, host, () => {
  const mode = args.compression ? (args.flush ? "compression + res.flush()" : "compression") : "no compression";
  console.log(`express proxy (${mode}): listening on http://${args.listen}`);
});
server.keepAliveTimeout = 65_000;
