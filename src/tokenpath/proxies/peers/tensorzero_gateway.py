"""TensorZero's gateway, as the PyPI wheel ships it (a Rust HTTP gateway inside the extension module), started on
its own and kept running until SIGTERM. Run with the tools folder on sys.path:

    PYTHONPATH=$TOKENPATH_TOOLS/tensorzero python tensorzero_gateway.py --config tensorzero.toml

The embedded gateway picks its own port; the line `listening on URL` says which (tokenpath's catalogue reads it).
"""

import argparse
import signal
import sys
import threading

import tensorzero

ap = argparse.ArgumentParser()
ap.add_argument("--config", required=True)
args = ap.parse_args()
gateway = tensorzero._start_http_gateway(
    config_file=args.config, clickhouse_url=None, postgres_url=None, valkey_url=None, async_setup=False
)
print(f"tokenpath tensorzero: listening on {gateway.base_url}", flush=True)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
signal.signal(signal.SIGINT, lambda *_: stop.set())
stop.wait()
gateway.close()
sys.exit(0)
