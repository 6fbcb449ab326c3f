# Two commands set everything up on a fresh machine:
#   make run   - create .venv, install everything, start the server on 127.0.0.1:6379 (embedded store;
#                ARGS="--dir ./data" to keep its data on disk)
#   make test  - create .venv, install everything, run the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0
# A plain install from PyPI brings torch's CUDA build (several GB); on an ordinary machine take the CPU-only
# build from PyTorch's index: make venv TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=

.PHONY: venv run test lint typecheck bench soak clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, exactly this CPU build, so the project's torch range is already met
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) $(TORCH)
	$(BIN)/pip install --quiet -e '.[torch,onnx,tf,tflite,uvloop,metrics,dev]'
	touch $(STAMP)

run: venv
	$(BIN)/redisai-server --bind 127.0.0.1 --port 6379 $(ARGS)

test: venv
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: venv
	$(BIN)/python -m bench.resp_passthrough
	$(BIN)/python -m bench.tensor_bench
	$(BIN)/python -m bench.model_bench
	$(BIN)/python -m bench.dag_bench
	$(BIN)/python -m bench.graph_bench
	$(BIN)/python -m bench.batching_bench
	$(BIN)/python -m bench.cluster_bench
	$(BIN)/python -m bench.startup
	$(BIN)/python -m bench.rss_bench

# the long hostile-input and fault runs (bench/soak.py): 100k fuzz cases, 100 clients x 60 s, RSS, store restart
soak: venv
	$(BIN)/python -m bench.soak $(ARGS)

clean:
	rm -rf $(VENV) .clients .pytest_cache .mypy_cache .ruff_cache
