# Two commands set everything up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST := $(BIN)/python -m pytest

.PHONY: run test soak bench build clean kcat

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip "setuptools>=68" wheel "Cython>=3.0"

# The extras hold the test oracles (kafka-python), bench peers (aiokafka) and Spark.
$(STAMP): $(BIN)/python pyproject.toml setup.py
	$(BIN)/pip install -q --no-build-isolation -e ".[test,bench,spark]"
	touch $@

# Rebuilds only the Cython modules whose sources changed.
build: $(STAMP)
	$(BIN)/python setup.py -q build_ext --inplace

# tests/clients/test_kcat.py drives the kcat binary; distributions name it kcat
# (Debian 11+, Ubuntu 22.04+) or, before that, kafkacat. Root needs no sudo.
kcat:
	@command -v kcat >/dev/null 2>&1 || command -v kafkacat >/dev/null 2>&1 || { \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		command -v apt-get >/dev/null 2>&1 || { echo "kcat missing and no apt-get: install kcat by hand" >&2; exit 1; }; \
		echo "installing kcat with apt-get"; \
		$$SUDO apt-get update -qq >/dev/null && \
		{ DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kcat >/dev/null || \
		  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kafkacat >/dev/null; }; \
	}

run: build
	$(BIN)/logstore broker

test: build kcat
	$(PYTEST) -q -m "not soak" tests

soak: build kcat
	$(PYTEST) -q -m soak tests

# Each suite writes its JSON, then its report prints the ratios.
BENCH := $(PYTEST) -q --benchmark-only --benchmark-columns=min,median,iqr,ops,rounds --benchmark-group-by=group

bench: build
	@mkdir -p .benchmarks
	$(BENCH) bench/test_codec.py --benchmark-json=.benchmarks/codec.json --benchmark-min-rounds=10 \
		--benchmark-sort=name
	$(BIN)/python bench/report.py .benchmarks/codec.json
	$(BENCH) bench/test_storage.py --benchmark-json=.benchmarks/storage.json
	$(BIN)/python bench/storage_report.py .benchmarks/storage.json
	$(BENCH) bench/test_producer_state.py --benchmark-json=.benchmarks/producer.json
	$(BIN)/python bench/producer_report.py .benchmarks/producer.json
	$(BENCH) bench/test_transactions.py --benchmark-json=.benchmarks/transactions.json
	$(BIN)/python bench/transactions_report.py .benchmarks/transactions.json
	$(BENCH) bench/test_broker.py --benchmark-json=.benchmarks/broker.json
	$(BIN)/python bench/broker_report.py .benchmarks/broker.json
	$(BENCH) bench/test_broker_transactions.py --benchmark-json=.benchmarks/broker_transactions.json
	$(BIN)/python bench/txn_broker_report.py .benchmarks/broker_transactions.json
	$(BENCH) bench/test_broker_groups.py --benchmark-json=.benchmarks/broker_groups.json
	$(BIN)/python bench/groups_broker_report.py .benchmarks/broker_groups.json
	$(BENCH) bench/test_spark.py --benchmark-json=.benchmarks/spark.json
	$(BIN)/python bench/spark_report.py .benchmarks/spark.json
	$(BENCH) bench/test_embedded.py --benchmark-json=.benchmarks/embedded.json
	$(BIN)/python bench/embedded_report.py .benchmarks/embedded.json
	$(BENCH) bench/test_assignors.py --benchmark-json=.benchmarks/assignors.json
	$(BIN)/python bench/test_assignors.py .benchmarks/assignors.json
	$(BENCH) bench/test_cleaner.py --benchmark-json=.benchmarks/cleaner.json
	$(BIN)/python bench/test_cleaner.py .benchmarks/cleaner.json
	$(BENCH) bench/test_coordinator_load.py --benchmark-json=.benchmarks/coordinator_load.json
	$(BIN)/python bench/test_coordinator_load.py .benchmarks/coordinator_load.json

clean:
	rm -rf build native/*.c native/*.so .pytest_cache .benchmarks
