"""Real inference servers as origins (issue 37): llama.cpp's server and llama-cpp-python's, built from PyPI's source
by scripts/build-llama into the tools folder, started on a free port like a proxy, their behaviour read off the wire
(HTTP/1.0 framing, the headers a path acts on) and recorded as shapes the stub replays."""
