# durable-agent: every command installs what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CACHE ?= $(HOME)/.cache/durable-agent
FERRETDB := $(CACHE)/bin/ferretdb

.PHONY: venv ferretdb chromium test test-python lint typecheck unit demo bench bench-peers bench-cost bench-cancel bench-load bench-http compose-secrets clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# FerretDB (MongoDB wire-compatible, SQLite backend) for the MongoStore tests; built once, cached
# outside the repo. A plain `go install` gives a binary that panics on start (its version file is
# not in the module), so tests/support/ferretdb.py builds from the module source and checks it runs.
ferretdb: venv
	@if [ -n "$$MONGODB_URI" ]; then echo "MONGODB_URI set: not building FerretDB"; \
	elif command -v go >/dev/null; then $(PY) -m tests.support.ferretdb build $(FERRETDB); \
	else echo "neither Go nor MONGODB_URI: the Mongo tests will fail (install Go or set MONGODB_URI)"; fi

# Headless Chromium (Debian package) for the Temporal UI screenshot test.
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

lint: venv
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/ruff format --check src tests bench examples

typecheck: venv
	$(VENV)/bin/mypy

# Python 3.11.0-3.11.7 share one AST recursion counter between threads (CPython gh-106905, fixed
# in 3.11.8): a traceback formatted in one thread (3.11 parses each line for its ^^^ markers) can
# make a parse in another raise SystemError, which the tests' workers turn into a failed workflow.
# Without position tables no traceback parses, so the race is gone from the tests' processes.
export PYTHONNODEBUGRANGES := 1

unit: venv
	$(VENV)/bin/pytest -q -x

test: venv ferretdb chromium lint typecheck
	DURABLE_AGENT_FERRETDB=$(FERRETDB) $(VENV)/bin/pytest -q

# A part of the suite on another Python, in its own venv (.venv-3.13 for 3.13), as in
# `make test-python PYTHON=/path/to/python3.13`: what differs between versions (protocol checks,
# asyncio, threads, the collector) shows in the library, store, worker, server and CLI tests here.
# `make test` stays on one interpreter.
PYVER = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PY_TESTS ?= tests/test_*.py tests/filestore tests/providers tests/durable_runs \
	tests/temporal/test_run_input.py tests/temporal/test_approvals.py \
	tests/temporal/test_replay_versions.py tests/temporal/test_deleted_sessions.py \
	tests/mongo/test_faults.py tests/server/test_agui.py tests/server/test_stream_order.py \
	tests/server/test_chat_page_text.py tests/cli/test_demo.py

test-python:
	@test -n "$(PYVER)" || { echo "PYTHON=$(PYTHON) does not run: make test-python PYTHON=python3.13"; exit 2; }
	$(MAKE) ferretdb chromium VENV=.venv-$(PYVER)
	DURABLE_AGENT_FERRETDB=$(FERRETDB) .venv-$(PYVER)/bin/pytest -q $(PY_TESTS)

# The main job: a real Temporal dev server, a worker, a scripted conversation, the UI link.
demo: venv
	$(VENV)/bin/durable-agent demo

# Stores, model view, in-process agent, MongoStore on FerretDB and the Temporal executor, default
# sizes (the Temporal part about 5 minutes); the other bench/*.py run on their own (their docstrings).
bench: venv ferretdb
	@for script in bench/store_bench.py bench/view_bench.py bench/agent_bench.py bench/mongo_bench.py bench/temporal_bench.py; do \
		if [ -f $$script ]; then echo "== $$script"; DURABLE_AGENT_FERRETDB=$(FERRETDB) $(PY) $$script || exit 1; fi; \
	done

# Many sessions on 1 and 2 worker processes, and a worker SIGKILLed under load (a few minutes);
# writes bench/results/load.json (the figures of README's load table).
bench-load: venv ferretdb
	DURABLE_AGENT_FERRETDB=$(FERRETDB) $(PY) bench/load_bench.py --json bench/results/load.json

# Side-by-side benchmarks with the libraries users would pick instead, in their own venv so their
# dependencies never touch the test environment (pins in bench/peers/requirements.txt).
PEERS_VENV ?= .venv-peers

bench-peers: ferretdb $(PEERS_VENV)/.installed
	DURABLE_AGENT_FERRETDB=$(FERRETDB) $(PEERS_VENV)/bin/python bench/peers/run.py

# Temporal billable actions, client and worker CPU per conversation turn vs Pydantic AI, at 0, 1, 3
# and 10 s of model latency (about 14 minutes); BEFORE=<rev> adds durable-agent as of <rev>.
bench-cost: $(PEERS_VENV)/.installed
	$(PEERS_VENV)/bin/python bench/cost_bench.py $(if $(BEFORE),--before $(BEFORE))

# Seconds from stream.cancel() to a streaming model call's stop on the worker (p50, p95);
# BEFORE=<rev> adds durable-agent as of <rev>.
bench-cancel: venv
	$(PY) bench/cancel_bench.py $(if $(BEFORE),--before $(BEFORE))

# The HTTP API (entry -> frame, first token, replay, 200 clients, the server's reads and CPU per
# run, resume at 9,990) beside LangGraph's Agent Server (langgraph dev from the peers' venv), a few
# minutes.
bench-http: venv $(PEERS_VENV)/.installed
	$(PY) bench/http_bench.py

$(PEERS_VENV)/.installed: bench/peers/requirements.txt pyproject.toml
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install -q -r bench/peers/requirements.txt
	$(PEERS_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

# docker-compose.yml's MongoDB passwords and replica-set key: random, in .compose/ (mode 600),
# generated once and kept (compose refuses to start without them).
compose-secrets:
	$(PYTHON) deploy/compose_secrets.py .compose

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
