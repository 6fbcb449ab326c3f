# Two commands set everything up on a fresh machine:
#   make run   - create .venv with TORCH and ONNX, start the server on 127.0.0.1:6379 (embedded store;
#                ARGS="--dir ./data" to keep its data on disk; EXTRAS=tf,tflite adds the TF and TFLITE backends)
#   make test  - create .venv with every backend and the dev tools, run the whole test suite
# `make test` compiles the per-request hot path with mypyc first (server/compiled.py: mypyc's type-check on one
# core, then a C file per module on every core; again whenever one of those sources changes). `make run` never
# waits for it: with no current build it serves pure Python and compiles in the background (build/compile.log),
# and the next `make run` serves the compiled build.
# COMPILE=0 keeps everything pure Python: `make test COMPILE=0`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
comma := ,
# The extras each virtualenv set holds. `make run` installs the serving set (torch, onnx, uvloop, metrics and
# mypy to compile with, ~1.2 GB), plus EXTRAS; `make test`, `make lint` and `make venv` install everything.
EXTRAS ?=
RUN_EXTRAS := torch,onnx,uvloop,metrics,compile$(if $(EXTRAS),$(comma)$(EXTRAS))
FULL_EXTRAS := torch,onnx,tf,tflite,uvloop,metrics,dev
# one stamp per set: .venv/.installed-torch+onnx+...; pyproject.toml newer than it reinstalls that set
RUN_STAMP := $(VENV)/.installed-$(subst $(comma),+,$(RUN_EXTRAS))
FULL_STAMP := $(VENV)/.installed-$(subst $(comma),+,$(FULL_EXTRAS))
TORCH := torch==2.13.0
# A plain install from PyPI brings torch's CUDA build (several GB); on an ordinary machine take the CPU-only
# build from PyTorch's index: make venv TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=
COMPILE ?= 1
COMPILED := build/.compiled
# the sources of server/compiled.py's HOT_MODULES: a change to one rebuilds the compiled path
HOT_SOURCES := $(shell sed -n 's/^    "\([a-z_.]*\)",$$/\1/p' server/compiled.py | tr . / | sed 's/$$/.py/')
SERVE := $(BIN)/redisai-server --bind 127.0.0.1 --port 6379 $(ARGS)

.PHONY: venv venv-run venv-python compile purge-compiled run test test-python gpu-check gpu-bench lint typecheck bench soak clean

venv: $(FULL_STAMP)

venv-run: $(RUN_STAMP)

# mypyc's shared library (make compile) is a top-level module at the tree's root, which the editable install does
# not map (it maps the packages only): a .pth file puts the root on the virtualenv's path, so the redisai-server
# command (make run) finds it from any directory (tests/integration/test_entry_point.py)
$(VENV)/.installed-%: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, exactly this CPU build, so the project's torch range is already met
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) $(TORCH)
	$(BIN)/pip install --quiet -e '.[$(subst +,$(comma),$*)]'
	$(BIN)/python -c 'import sys, sysconfig; open(sysconfig.get_path("purelib") + "/redisai_server_root.pth", "w").write(sys.argv[1] + "\n")' "$(CURDIR)"
	touch $@

# The compiled modules land beside their sources (*.so, ignored by git); COMPILE=0 removes them instead.
ifeq ($(COMPILE),1)
compile: $(COMPILED)
else
compile: purge-compiled
endif

# Order-only on mypyc: reinstalling a virtualenv set (make run, then make test) does not recompile.
$(COMPILED): setup.py server/compiled.py $(HOT_SOURCES) | $(BIN)/mypyc
	REDISAI_COMPILE=1 $(BIN)/python setup.py --quiet build_ext --inplace
	# the build is now current; an edit that changes no C (a comment) leaves mypyc's library untouched, and
	# server/compiled.py would then call the module stale forever: date the library by this build
	find . -maxdepth 1 -name '*__mypyc*.so' -exec touch {} +
	mkdir -p build && touch $(COMPILED)

$(BIN)/mypyc:
	$(MAKE) --no-print-directory venv-run

purge-compiled:
	find server backends dag -name '*.so' -delete
	rm -f *__mypyc*.so $(COMPILED)

# A current compiled build is served as it is; otherwise this start serves pure Python (REDISAI_PURE_PYTHON=1:
# a stale .so is never imported) and `make compile` runs detached in the background, one at a time
# (build/compile.lock), logging to build/compile.log, so the first PONG never waits for mypyc.
ifeq ($(COMPILE),1)
run: venv-run
	@if $(MAKE) --no-print-directory -q $(COMPILED) 2>/dev/null; then exec $(SERVE); fi; \
	mkdir -p build; \
	echo "hot path: serving pure Python; compiling it in the background (build/compile.log), the next make run serves it"; \
	setsid -f flock -n build/compile.lock sh -c 'exec nice -n 10 $(MAKE) --no-print-directory compile > build/compile.log 2>&1' \
	    < /dev/null > /dev/null 2>&1; \
	REDISAI_PURE_PYTHON=1 exec $(SERVE)
else
run: venv-run purge-compiled
	$(SERVE)
endif

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

# Every Python in pyproject's range runs the same code: 3.11 the whole suite (make test); 3.12 and 3.13 (CI:
# .ci/run) the tests that need no torch, in pure Python, in a virtualenv of their own without torch (PyPI's
# torch for them is a multi-GB CUDA build): make test-python PY=python3.12. PY is found on the PATH, else
# among pyenv's versions. An explicit list of torch-free unit and integration modules: a new test module that
# imports no torch is added by hand (a test that cannot run without torch is not listed).
PY ?= python3.12
PY_VENV := build/venv-$(notdir $(PY))
PY_UNIT := \
	attempts batching_policy blocking_commands bulk_reader catalogue cluster_keys cluster_state cluster_watch \
	command_table commands_doc compiled config config_info_units connection cost_estimate dag_engine \
	dag_parse decoded_inputs eager graph_args graph_plan graph_scheduler handle_cache inline_batch \
	inline_policy key_specs layers model_args ops_logs_banner resp script_args shared_checks \
	tensor_args tensor_writes tensorget_fast_reply watchdog
PY_TESTS := $(foreach name,$(PY_UNIT),tests/unit/test_$(name).py) \
	tests/integration/test_torch_free.py tests/integration/test_passthrough.py \
	--deselect tests/integration/test_passthrough.py::test_type_names_ai_values_as_redisai_does \
	tests/integration/test_protocol_errors.py tests/integration/test_tensor.py \
	tests/integration/test_connection_state.py tests/integration/test_shared_relay.py \
	tests/integration/test_big_arguments.py

$(PY_VENV)/.installed: pyproject.toml
	@py=$$($(PY) -c 'import sys; print(sys.executable)' 2>/dev/null || \
	    PYENV_VERSION=$$(pyenv versions --bare 2>/dev/null | grep -E "^$(subst python,,$(notdir $(PY)))(\.[0-9]+)*$$" | tail -1) \
	    pyenv which $(notdir $(PY)) 2>/dev/null); \
	test -n "$$py" || { echo "$(PY): not on the PATH nor among pyenv's versions" >&2; exit 1; }; \
	echo "$(PY) is $$py"; rm -rf $(PY_VENV) && "$$py" -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install --quiet -e '.[onnx,uvloop,metrics,test]'
	! $(PY_VENV)/bin/python -c 'import torch' 2>/dev/null
	touch $@

venv-python: $(PY_VENV)/.installed

test-python: $(PY_VENV)/.installed
	$(PY_VENV)/bin/python --version
	$(PY_VENV)/bin/python -c 'from server.compiled import describe_build; print("hot path:", describe_build())'
	$(PY_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PY_TESTS) $(PYTEST_ARGS)

# The tests marked gpu (tests/gpu/): models, a script, a DAG, stored graphs and auto-batching on GPU:0 against the
# CPU, INFO's CUDA build, a GPU past the last refused. They skip where torch sees no CUDA; embedded store only.
gpu-check: venv
	$(BIN)/python -m pytest -v -p no:cacheprovider -m gpu -rs tests/gpu $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: venv compile
	$(BIN)/python -m bench.resp_passthrough
	$(BIN)/python -m bench.tensor_bench
	$(BIN)/python -m bench.datapath_bench
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

# where CUDA is present (bench/gpu_bench.py; docs/gpu.md): ResNet-18, torch's floor and the server side by side
gpu-bench: venv
	$(BIN)/python -m bench.gpu_bench $(ARGS)
