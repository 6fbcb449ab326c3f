# Two commands set everything up on a fresh machine:
#   make run   - create .venv, install everything, start the server on 127.0.0.1:6379 (embedded store;
#                ARGS="--dir ./data" to keep its data on disk)
#   make test  - create .venv, install everything, run the whole test suite
# Both compile the per-request hot path with mypyc first (server/compiled.py; ~3.5 minutes, again whenever one
# of those sources changes). COMPILE=0 keeps everything pure Python: `make test COMPILE=0`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# mypyc's shared library (make compile) is a top-level module at the tree's root, which the editable install does
# not map (it maps the packages only): a .pth file puts the root on the virtualenv's path, so the redisai-server
# command (make run) finds it from any directory (tests/integration/test_entry_point.py)
ROOT_ON_PATH := $(VENV)/.root-on-path
TORCH := torch==2.13.0
# A plain install from PyPI brings torch's CUDA build (several GB); on an ordinary machine take the CPU-only
# build from PyTorch's index: make venv TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=
COMPILE ?= 1
COMPILED := build/.compiled
# the sources of server/compiled.py's HOT_MODULES: a change to one rebuilds the compiled path
HOT_SOURCES := $(shell sed -n 's/^    "\([a-z_.]*\)",$$/\1/p' server/compiled.py | tr . / | sed 's/$$/.py/')

.PHONY: venv compile purge-compiled run test lint typecheck bench soak clean

venv: $(STAMP) $(ROOT_ON_PATH)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, exactly this CPU build, so the project's torch range is already met
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) $(TORCH)
	$(BIN)/pip install --quiet -e '.[torch,onnx,tf,tflite,uvloop,metrics,dev]'
	touch $(STAMP)

$(ROOT_ON_PATH): $(STAMP)
	$(BIN)/python -c 'import sys, sysconfig; open(sysconfig.get_path("purelib") + "/redisai_server_root.pth", "w").write(sys.argv[1] + "\n")' "$(CURDIR)"
	touch $(ROOT_ON_PATH)

# The compiled modules land beside their sources (*.so, ignored by git); COMPILE=0 removes them instead.
ifeq ($(COMPILE),1)
compile: $(COMPILED)
else
compile: purge-compiled
endif

$(COMPILED): $(STAMP) setup.py server/compiled.py $(HOT_SOURCES)
	REDISAI_COMPILE=1 $(BIN)/python setup.py --quiet build_ext --inplace
	# the build is now current; an edit that changes no C (a comment) leaves mypyc's library untouched, and
	# server/compiled.py would then call the module stale forever: date the library by this build
	find . -maxdepth 1 -name '*__mypyc*.so' -exec touch {} +
	mkdir -p build && touch $(COMPILED)

purge-compiled:
	find server backends dag -name '*.so' -delete
	rm -f *__mypyc*.so $(COMPILED)

run: venv compile
	$(BIN)/redisai-server --bind 127.0.0.1 --port 6379 $(ARGS)

# The suite runs on the build as made (compiled unless COMPILE=0); then the tests of the compiled modules run
# once more on their .py sources (REDISAI_PURE_PYTHON=1), the path wherever mypyc cannot build.
PURE_TESTS := tests/unit tests/integration/test_protocol_errors.py tests/integration/test_passthrough.py \
	tests/integration/test_tensor.py tests/integration/test_connection_state.py \
	tests/integration/test_shared_relay.py tests/integration/test_pubsub_blocking.py tests/integration/test_model.py

test: venv compile
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)
ifeq ($(COMPILE),1)
	REDISAI_PURE_PYTHON=1 $(BIN)/python -m pytest -q $(PURE_TESTS)
endif

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: venv compile
	$(BIN)/python -m bench.resp_passthrough
	$(BIN)/python -m bench.tensor_bench
	$(BIN)/python -m bench.model_bench
	$(BIN)/python -m bench.dag_bench
	$(BIN)/python -m bench.graph_bench
	$(BIN)/python -m bench.batching_bench
	$(BIN)/python -m bench.cluster_bench
	$(BIN)/python -m bench.compiled_bench
	$(BIN)/python -m bench.startup
	$(BIN)/python -m bench.rss_bench
	$(BIN)/python -m bench.instructions

# the long hostile-input and fault runs (bench/soak.py): 100k fuzz cases, 100 clients x 60 s, RSS, store restart
soak: venv compile
	$(BIN)/python -m bench.soak $(ARGS)

clean:
	rm -rf $(VENV) .clients .pytest_cache .mypy_cache .ruff_cache build
	find server backends dag -name '*.so' -delete
	rm -f *__mypyc*.so
