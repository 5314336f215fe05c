// Preloaded (node --import) into a Node.js peer that takes a port but no address (Portkey's start-server.js calls
// server.listen(port, undefined, cb)): a listen without a host binds TOKENPATH_LISTEN_HOST instead of every
// interface, so the peer is on loopback like every other server tokenpath starts.
import net from "node:net";

const host = process.env.TOKENPATH_LISTEN_HOST || "127.0.0.1";
const listen = net.Server.prototype.listen;

const isPort = (value) => typeof value === "number" || (typeof value === "string" && /^\d+$/.test(value));

net.Server.prototype.listen = function (...args) {
  const [first, second] = args;
  if (isPort(first) && typeof second !== "string") {
    // listen(port), listen(port, cb), listen(port, backlog, cb), listen(port, undefined, cb)
    const rest = args.slice(1);
    if (rest.length && rest[0] === undefined) rest.shift();
    return listen.call(this, first, host, ...rest);
  }
  if (first && typeof first === "object" && !("fd" in first) && !("path" in first) && !first.host) {
    return listen.call(this, { ...first, host }, ...args.slice(1));
  }
  return listen.apply(this, args);
};
