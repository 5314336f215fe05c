"""A TCP relay that dies mid-run, whatever the host's load: it relays the first stream request (a connection whose
first bytes are a POST) whole, and exits when the second one arrives, before relaying a byte of it. (A relay killed
after N seconds died before it was ready on a loaded host, and the matrix then skipped it instead of losing rows.)

    python tests/e2e/dying_relay.py --listen HOST:PORT --upstream HOST:PORT
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import threading


def pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    up_host, up_port = args.upstream.rsplit(":", 1)
    listener = socket.create_server((host, int(port)))
    streams = 0
    print(f"listening on {host}:{port}", flush=True)
    while True:
        client, _ = listener.accept()
        first = client.recv(65536)
        if first.startswith(b"POST"):
            streams += 1
            if streams == 2:
                os._exit(0)  # dies mid-run: this stream and every later one fail
        upstream = socket.create_connection((up_host, int(up_port)))
        upstream.sendall(first)
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()


if __name__ == "__main__":
    main()
