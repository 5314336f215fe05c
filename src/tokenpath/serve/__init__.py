"""Server and process plumbing: the one runner (bind, SO_REUSEPORT workers, signals, drain) that the stub and the
gateway run under, the asyncio HTTP shell they serve through, event loops, scheduling, backpressure, the /metrics
exporter, per-run certificates, and the child processes the instrument starts and always stops."""
