# Two commands on a fresh machine:  `make demo`  and  `make test`.
# Every target builds or refreshes .venv itself; the stamps make a second run cheap.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP_BASE := $(VENV)/.stamp-base
STAMP_DEV  := $(VENV)/.stamp-dev

.PHONY: demo test test-all lint typecheck pytest bench bench-quick sample real-sample lab chromium prometheus tshark ksc docs clean help

help:
	@echo "make demo   - build .venv, then simulate (or reuse the sample) -> replay -> summary"
	@echo "make test   - build .venv with dev+oracle extras, then ruff, mypy and pytest"
	@echo "make test-all - make test with the tests marked slow too (what CI runs)"
	@echo "make bench  - run the benchmarks in benchmarks/ and print their figures"
	@echo "make bench-quick - every benchmark's --quick smoke run (CI: no timed assertions)"
	@echo "make sample - regenerate the bundled sample capture from the trace"
	@echo "make real-sample - record Dynamo's own relay anew into cbi1kit/data/real.kvrcap (root)"
	@echo "make docs   - the API reference, docs/ pages and notebooks into build/docs (warnings fail)"
	@echo "make lab    - JupyterLab on notebooks/ with this project's environment as the kernel"

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP_BASE): pyproject.toml | $(VENV)/bin/python
	$(PIP) install --quiet -e '.[relay,fleet,notebooks]' playwright  # tools/demo.py: screenshots
	$(PY) -m cbi1kit._warm
	touch $@

$(STAMP_DEV): pyproject.toml | $(VENV)/bin/python
	$(PIP) install --quiet -e '.[dev,oracle]'
	$(PY) -m cbi1kit._warm
	touch $@ $(STAMP_BASE)

# Debian's chromium drives the browser test and the demo's screenshots (Playwright's own browser
# download needs a network). Installed with apt when missing and we are root (containers, CI);
# otherwise a note: the browser test then skips (fails under CI=true), the demo takes no screenshots.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium with apt"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "note: chromium is missing (apt-get install chromium): no browser test, no screenshots"; \
	fi

# Debian's prometheus scrapes `cbi1kit watch --metrics` in its test; installed as chromium is
prometheus:
	@command -v prometheus >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing prometheus with apt"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	else \
		echo "note: prometheus is missing (apt-get install prometheus): its scrape test skips"; \
	fi

# Debian's tshark (and dumpcap) run the Wireshark plugin's tests on captures and on live gRPC
# traffic, valgrind the file reader's, Lua 5.3 and 5.4 its XXH3 as Wireshark 4.4 on would;
# installed as chromium is
TSHARK_TOOLS := tshark valgrind lua5.3 lua5.4
tshark:
	@(for t in $(TSHARK_TOOLS); do command -v $$t >/dev/null 2>&1 || exit 1; done) || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing $(TSHARK_TOOLS) with apt"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(TSHARK_TOOLS) >/dev/null; \
	else \
		echo "note: apt-get install $(TSHARK_TOOLS) to run the Wireshark tests that skip here"; \
	fi

# the official Kaitai Struct compiler (npm: its JavaScript build, driven by node) that the Kaitai
# test compiles `cbi1kit layout --ksy` with, kept in .ksc/; without npm that test skips
KSC := .ksc/node_modules/kaitai-struct-compiler/package.json
ksc: $(KSC)
$(KSC):
	@if command -v npm >/dev/null 2>&1; then \
		npm install --silent --no-audit --no-fund --prefix .ksc \
			kaitai-struct-compiler@0.11.0 js-yaml@4.1.0 >/dev/null; \
	else \
		echo "note: npm is missing: the Kaitai test skips"; \
	fi

# simulate (or reuse cbi1kit/data/sample.kvrcap) → replay → summary → report → notebook screenshots
demo: $(STAMP_BASE) chromium
	$(PY) -m tools.demo --force

# the bundled capture, byte-identical from the trace (fixed seeds, simulated clock)
sample: $(STAMP_BASE)
	$(PY) -m cbi1kit simulate cbi1kit/data/mooncake/conversation_trace.jsonl -o cbi1kit/data/sample.kvrcap \
		--sample --force --no-progress

# Dynamo's own relay (ai-dynamo-runtime, the oracle extra) recorded on loopback in a network
# namespace of its own (unshare -n: root), with the workload it was fed (tools/realrelay.py)
real-sample: $(STAMP_DEV)
	unshare -n $(PY) -m tools.realrelay cbi1kit/data/real.kvrcap --chains 200 --evict 60 --seconds 10
	rm -f cbi1kit/data/real.kvrcap.list.txt

# a free port, this environment's kernel, saves that keep the tracked notebooks output-free, root ok
lab: $(STAMP_BASE)
	$(PY) -m cbi1kit lab

lint: $(STAMP_DEV)
	$(VENV)/bin/ruff check cbi1kit tools tests benchmarks notebooks docs/conf.py
	$(VENV)/bin/ruff format --check cbi1kit tools tests benchmarks notebooks docs/conf.py

typecheck: $(STAMP_DEV)
	$(VENV)/bin/mypy cbi1kit tools docs/conf.py

# the tests marked slow (pyproject: whole runs, exhaustive sweeps) run in CI and `make test-all`
PYTEST_MARK := $(if $(or $(CI),$(ALL)),,-m "not slow")

pytest: $(STAMP_DEV) chromium prometheus tshark ksc
	$(PY) -m pytest $(PYTEST_MARK)

test: lint typecheck pytest

test-all:
	$(MAKE) test ALL=1

# the reference from the docstrings (docs/conf.py); tests/test_docs.py builds it in `make test`
docs: $(STAMP_DEV)
	$(PY) -m sphinx -b html -W --keep-going -n -q docs build/docs -d build/docs/.doctrees
	@echo "open build/docs/index.html"

# each prints its figures beside a baseline of the same run (benchmarks/README.md)
bench: $(STAMP_DEV)
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

bench-quick: $(STAMP_DEV)
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f --quick || exit 1; done

# everything a run leaves behind: the venv, tool caches, numba's kernel caches, the report
clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache reports
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
