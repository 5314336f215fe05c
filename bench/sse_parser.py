"""CPU per frame of the SSE parser (the client's recv loop), whole frames per read and frames split in two.

Compare two trees side by side in one run, e.g. the current one against a checkout of an older commit:
    .venv/bin/python bench/sse_parser.py --src src --src /tmp/base/src --rounds 3
Each figure is the best of 5 passes over 20,000 frames (microseconds per frame).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

FRAME = (
    b'data: {"id":"cmpl-0123456789abcdef01234567","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":" alpha1"},"finish_reason":null}]}\n\n'
)
N = 20_000

MEASURE = """
import sys, time, json
sys.path.insert(0, sys.argv[1])
from tokenpath.wire.sse import SSEParser
frame = %r
def run(split):
    best = 1e9
    for _ in range(5):
        parser = SSEParser()
        t = time.perf_counter()
        for _ in range(%d):
            if split:
                parser.feed(frame[:50])
                parser.feed(frame[50:])
            else:
                parser.feed(frame)
        best = min(best, time.perf_counter() - t)
    return best / %d * 1e6
print(json.dumps({"whole_us": round(run(False), 3), "split_us": round(run(True), 3)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", required=True, help="a tree's src/ folder; repeat to compare")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the trees")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {src: [] for src in args.src}
    for _ in range(args.rounds):
        for src in args.src:  # interleaved, so drift on the host hits every tree alike
            out = subprocess.run(
                [sys.executable, "-c", MEASURE % (FRAME, N, N), src], capture_output=True, text=True, check=True
            )
            results[src].append(json.loads(out.stdout))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
