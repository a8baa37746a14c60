# relattn: SQLite loadable extension for relative-position self-attention.
#
#   make            build relattn.so (.load ./relattn)
#   make help       this list
#   make test       unit tests (C), SQL tests (pytest), shell tests; the
#                   numerical ones again under each OpenBLAS kernel set
#   make asan       the same tests under -fsanitize=address,undefined
#   make demo       the bundled model on the bundled corpus, in the sqlite3 shell
#   make hf-demo    a Hugging Face classifier (models/deberta-licenses) over a table, in SQL
#   make t5-demo    a Hugging Face T5 encoder-decoder (models/t5-unshuffle) over a table, in SQL
#   make t5-model   retrain models/t5-unshuffle (PyTorch, a few minutes)
#   make embed-model  retrain models/embed-manuals (vector search) and measure it in SQL
#   make bench      ratios: relative vs plain attention, SQL overhead, scaling
#   make experiments  the position sweep (experiments/sweep.py, docs/experiments.md)
#   make fuzz       libFuzzer targets, bounded time each
#   make deps       install missing Debian packages (apt-get only when needed)
#   make install    relattn.so, the Python module, the bundled model, SQL scripts and docs
#                   under PREFIX (default /usr/local; DESTDIR honoured); make uninstall

CC      ?= cc
PYTHON  ?= /usr/bin/python3
BUILD   ?= build
SO      ?= relattn.so
OPT     ?= -O2 -g
SAN     ?=
CFLAGS  += $(OPT) $(SAN) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter \
           -Werror=implicit-function-declaration \
           -fPIC -fvisibility=hidden -pthread -Isrc -Iext -I$(BUILD)/gen
LDLIBS  += -lopenblas -lm -lpthread

SRC      := $(sort $(wildcard src/*.c))
EXT      := $(sort $(wildcard ext/*.c))
SRC_OBJ  := $(SRC:%.c=$(BUILD)/%.o)
EXT_OBJ  := $(EXT:%.c=$(BUILD)/%.o)
UNIT     := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN := $(UNIT:tests/unit/%.c=$(BUILD)/unit/%)
HEADERS  := $(wildcard src/*.h ext/*.h)

# Debian packages the build, the tests and the demo need (g++: npm ci builds
# better-sqlite3 from source for the Node client test, no prebuilt download here;
# python3-torch: the test of models/train_corpus.py trains a small model;
# chromium and a font: the SVG pictures rendered in a real browser;
# python3-distributed: Dask, for cluster/; python3-sentencepiece: the reference
# the sentencepiece tokenizer is tested and benchmarked against; dpkg-dev and
# tcl: SQLite built with SQLITE_DEBUG from its Debian source, tests/sqlite_debug.sh;
# perl (its Unicode::UCD): the Unicode ages src/unicode_gen.py and its test read;
# python3-pytest-xdist: make test spreads the tests over the cores).
DEB_PKGS ?= gcc make libc6-dev libsqlite3-dev sqlite3 libopenblas-dev \
            python3 python3-numpy python3-pytest g++ python3-torch chromium \
            fonts-dejavu-core python3-distributed python3-sentencepiece \
            dpkg-dev tcl perl python3-pytest-xdist
DEB_BENCH ?= python3-torch
DEB_ASAN ?= clang libclang-rt-14-dev
# Retraining the bundled model: PyTorch, and the public-domain texts it learns from.
DEB_MODEL ?= python3-torch bible-kjv bible-kjv-text sqlite3-doc

.PHONY: help install uninstall all deps deps-bench deps-fuzz deps-model experiments test unit asan asan-build demo hf-demo t5-demo model hf-model t5-model embed-model bench bench-tokenize bench-attention bench-torch bench-forward bench-scan bench-interrupt bench-cluster bench-deberta bench-qgemm bench-generate fuzz fuzz-build clean

all: $(SO)

# The list of targets at the top of this file.
help:
	@sed -n '3,/^$$/s/^# //p' $(firstword $(MAKEFILE_LIST))

$(SO): $(SRC_OBJ) $(EXT_OBJ)
	$(CC) $(CFLAGS) -shared -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# sql/schema.sql is the one text of the tables: ext/store.c includes it as a
# C string literal, one line of the file per line of the literal.
$(BUILD)/gen/schema_sql.h: sql/schema.sql
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@

$(BUILD)/ext/store.o: $(BUILD)/gen/schema_sql.h

# Unit tests link src/ only: it knows nothing of SQLite.
$(BUILD)/unit/%: tests/unit/%.c tests/unit/unit.h $(SRC_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(SRC_OBJ) $(LDLIBS)

unit: $(UNIT_BIN)

# Checks first; runs apt-get only for what is missing.
deps:
	@DEB_PKGS="$(DEB_PKGS)" sh tests/deps.sh
	@sh tests/node/deps.sh

deps-bench:
	@DEB_PKGS="$(DEB_PKGS) $(DEB_BENCH)" sh tests/deps.sh
	@sh tests/node/deps.sh bench

deps-model:
	@DEB_PKGS="$(DEB_PKGS) $(DEB_MODEL)" sh tests/deps.sh

# The bundled model on the bundled corpus: a fresh demo.db, sql/demo.sql in the sqlite3 shell.
demo: deps
	$(MAKE) all
	rm -f demo.db
	sqlite3 demo.db < sql/demo.sql

# A Hugging Face DeBERTa-v3-style classifier imported from its own files and run over a table
# of held-out paragraphs: sql/classify_demo.sql on a fresh hf-demo.db. The checkpoint is
# committed; when it is missing, it is trained first (make hf-model, a few minutes).
hf-demo: deps
	$(MAKE) all
	@test -f models/deberta-licenses/model.safetensors || $(PYTHON) models/train_deberta.py
	rm -f hf-demo.db
	sqlite3 hf-demo.db < sql/classify_demo.sql

# A Hugging Face T5ForConditionalGeneration imported from its own files, scoring candidate
# orders of held-out summaries' shuffled words given the shuffled text: sql/unshuffle_demo.sql
# on a fresh t5-demo.db. The checkpoint is committed; when it is missing, it is trained first.
t5-demo: deps
	$(MAKE) all
	@test -f models/t5-unshuffle/model.safetensors || $(PYTHON) models/train_t5.py
	rm -f t5-demo.db
	sqlite3 t5-demo.db < sql/unshuffle_demo.sql

# Retrains models/t5-unshuffle (PyTorch, python3-sentencepiece, the package summaries of
# /var/lib/dpkg/status; a few minutes on one thread). Not part of `make test`.
t5-model: deps
	$(PYTHON) models/train_t5.py

# Retrains the bundled model from scratch on one thread (about half an hour) and rewrites
# models/tiny.* and sql/demo_corpus.sql. Not part of `make test`.
model: deps-model
	$(PYTHON) models/train.py

# Retrains the Hugging Face-layout DeBERTa-v3-style classifier of models/deberta-licenses
# (PyTorch, python3-sentencepiece, the licences of /usr/share/common-licenses; a few minutes
# on one thread). Not part of `make test`.
hf-model: deps
	$(PYTHON) models/train_deberta.py

# Retrains models/embed-manuals, the sentence encoder of the vector search recipe (PyTorch on two
# threads; the package descriptions and manual pages of this machine; minutes), then measures its
# retrieval through SQL, relattn_embed + sqlite-vec against FTS5's bm25() (models/embed_eval.py,
# vec0 from tests/node, which make deps installs). Not part of `make test`.
embed-model: deps
	$(MAKE) all
	$(PYTHON) models/train_embedder.py
	$(PYTHON) models/embed_eval.py --so $(abspath $(SO))

# The position sweep: small models trained on the bundled corpus, scored in SQL,
# rows in experiments/results.db, pictures in docs/img/experiments (docs/experiments.md).
# Resumes: runs already in the results are skipped. Not part of `make test`.
experiments: deps-model
	$(MAKE) all
	$(PYTHON) experiments/sweep.py

# The normal build and the same suite under ASan + UBSan (LeakSanitizer
# included). Both builds come first, so the last line printed is the summary
# of the sanitized run (cluster/'s Dask tests run in the normal pass only: the
# workers are other processes); when the normal run fails, the sanitized one is
# skipped and its summary is the last line. The status reflects both.
# The normal pass and the kernel-set reruns spread over TEST_JOBS processes
# (pytest-xdist); the sanitized pass runs one process per test file, TEST_JOBS
# at a time (tests/run_sanitized.py), each file's leak check at its own exit.
# The sanitizer environment goes to the test processes only (through env), not
# to the runner's interpreter, whose own exit-time leaks LeakSanitizer would
# report.
# The builds run TEST_JOBS compilers at once; SQLite with SQLITE_DEBUG (its
# source fetched, then one compiler) is built beside the normal pass, and its
# lines are printed when the pass that needs it begins.
test: deps
	$(MAKE) -j$(TEST_JOBS) all unit
	$(MAKE) -j$(TEST_JOBS) asan-build
	@echo "== tests (normal build)"
	@sh tests/sqlite_debug.sh $(BUILD)/sqlite-debug > $(BUILD)/sqlite-debug.out 2>&1 & debug=$$!; \
	 $(TEST_ENV) $(PYTHON) -m pytest -q -n $(TEST_JOBS) tests cluster || { wait $$debug; exit 1; }; \
	 $(TEST_ENV) sh tests/coretypes.sh $(PYTHON) -n $(TEST_JOBS) $(NUMERIC_TESTS) || { wait $$debug; exit 1; }; \
	 wait $$debug; cat $(BUILD)/sqlite-debug.out; \
	 if [ -f $(SQLITE_DEBUG) ]; then \
	   echo "== tests on SQLite built with SQLITE_DEBUG"; \
	   LD_LIBRARY_PATH=$(dir $(SQLITE_DEBUG)) $(TEST_ENV) $(PYTHON) -m pytest -q -n $(TEST_JOBS) $(DEBUG_TESTS) || exit 1; \
	 fi; \
	 echo "== tests under ASan + UBSan + LeakSanitizer"; \
	 $(SANITIZED_RUN)

# Test processes at once: one a core.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)

# The slowest files under the sanitizers (a clang build of the fuzz targets,
# the documentation's examples in the shell, the C unit tests) start first,
# so that none is left to run alone at the end.
SANITIZED_FIRST := tests/test_fuzz_seeds.py tests/shell/test_doc_examples.py tests/test_unit.py
SANITIZED_RUN = $(PYTHON) tests/run_sanitized.py -j $(TEST_JOBS) $(SANITIZED_FIRST) tests -- \
	env $(ASAN_ENV) $(PYTHON) -m pytest -q

# The numerical tests, rerun by make test under each OpenBLAS kernel set the
# CPU can run but the one OpenBLAS picked, which the whole suite ran under
# (tests/coretypes.sh): under 20 s a set here.
NUMERIC_TESTS := tests/sql/test_attention.py tests/sql/test_model_fn.py \
                 tests/sql/test_determinism.py tests/sql/test_bundled_model.py \
                 tests/sql/test_schemes.py tests/sql/test_model_schemes.py \
                 tests/hf/test_ports.py tests/hf/test_hf_import.py \
                 tests/hf/test_sentence_transformers.py \
                 tests/hf/test_pairs.py tests/hf/test_zero_shot.py \
                 tests/hf/test_token_classification.py \
                 tests/sql/test_model_options.py tests/sql/test_heads.py \
                 tests/hf/test_t5_generation.py tests/shell/test_t5_demo.py \
                 'tests/test_unit.py::test_unit[test_seq2seq]' \
                 tests/sql/test_generate.py tests/sql/test_deberta_int8.py \
                 'tests/test_unit.py::test_unit[test_attention]' \
                 'tests/test_unit.py::test_unit[test_schemes]' \
                 'tests/test_unit.py::test_unit[test_forward]' \
                 'tests/test_unit.py::test_unit[test_batch]' \
                 'tests/test_unit.py::test_unit[test_generate]'

# The tests of how the extension calls SQLite, rerun by make test on a SQLite
# built with SQLITE_DEBUG (tests/sqlite_debug.sh): its assertions catch misuse
# the release build lets pass. About half a minute.
DEBUG_TESTS := tests/sql/test_schema_change.py tests/sql/test_scan.py \
               tests/sql/test_scan_sql.py tests/sql/test_store.py \
               tests/sql/test_call_rules.py tests/sql/test_interrupt.py
SQLITE_DEBUG := $(abspath $(BUILD)/sqlite-debug/libsqlite3.so.0)

TEST_ENV := RELATTN_SO=$(abspath $(SO)) RELATTN_UNIT=$(abspath $(BUILD)/unit) \
            RELATTN_SQLITE_DEBUG=$(SQLITE_DEBUG)

# Everything under AddressSanitizer + UBSan, in its own build directory. The
# Python tests load the sanitized .so into an unsanitized interpreter, so the
# runtime is preloaded. LeakSanitizer runs at exit; tests/lsan.supp names the
# interpreter's own allocations, and malloc_context_size keeps the stacks it
# matches short, so a leak of ours is never hidden behind Python frames
# further up (see the file). intercept_tls_get_addr=0: GCC 12's runtime
# can take a dynamic TLS block for an old glibc's (by its address modulo the
# page size), read a bogus range from before it, and the leak check's tracer
# then dies ("Tracer caught signal 11"). Without the interception those
# blocks are not scanned as roots: that can only add reports, never hide a
# leak (one put in ext/ and one in src/ are still reported).
ASAN_SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:malloc_context_size=6:intercept_tls_get_addr=0 \
	LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	RELATTN_SANITIZED=1 \
	RELATTN_SO=$(abspath build-asan/relattn.so) RELATTN_UNIT=$(abspath build-asan/unit) \
	RELATTN_SQLITE_DEBUG=$(SQLITE_DEBUG) \
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)"

asan-build:
	$(MAKE) BUILD=build-asan SO=build-asan/relattn.so OPT="-O1 -g" SAN="$(ASAN_SAN)" \
	  build-asan/relattn.so unit

asan: deps
	$(MAKE) asan-build
	$(SANITIZED_RUN)

# libFuzzer targets (tests/fuzz/fuzz_*.c), built with clang into build-fuzz:
# the extension's objects as for the loadable library, linked with the system
# SQLite. Each runs FUZZ_SECONDS; the summary gives executions and findings.
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                -fno-omit-frame-pointer
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN     := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_TARGETS ?= $(FUZZ_SRC:tests/fuzz/fuzz_%.c=%)

deps-fuzz:
	@DEB_PKGS="$(DEB_PKGS) $(DEB_ASAN)" sh tests/deps.sh

fuzz-build: deps-fuzz
	$(MAKE) CC=$(FUZZ_CC) BUILD=build-fuzz OPT="-O1 -g" \
	  SAN="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(FUZZ_BIN)

build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(SRC_OBJ) $(EXT_OBJ)
	$(CC) $(filter-out -fsanitize=fuzzer-no-link,$(CFLAGS)) -fsanitize=fuzzer \
	  -Itests/fuzz -o $@ $< $(SRC_OBJ) $(EXT_OBJ) -lsqlite3 $(LDLIBS)

fuzz: fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run.sh $(FUZZ_TARGETS)

# Benchmarks link src/ and the system SQLite, and load relattn.so as a user does.
$(BUILD)/bench/%: tests/bench/%.c $(SRC_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(SRC_OBJ) $(LDLIBS) -lsqlite3

# The forward pass: tokens/s through SQL vs the C API, attention's share.
bench-forward: all $(BUILD)/bench/bench_forward
	$(BUILD)/bench/bench_forward $(abspath $(SO))

# relattn_scan vs the scalar function, at 1 and 2 threads.
bench-scan: all
	$(PYTHON) tests/bench/bench_scan.py $(abspath $(SO))

# cluster/relattn_dask.py on LocalClusters of 1 and 2 workers vs a plain relattn_scan.
bench-cluster: all
	$(PYTHON) tests/bench/bench_cluster.py $(abspath $(SO))

# The attention kernel: relative vs plain vs naive, GFLOP/s, scratch; then
# the same relative attention in PyTorch, same threads.
bench-attention: all $(BUILD)/bench/bench_attention
	$(BUILD)/bench/bench_attention

bench-torch: all
	RELATTN_SO=$(abspath $(SO)) $(PYTHON) tests/bench/bench_torch.py

# The int8 and bf16 linear layers vs relattn_gemm's float32, one thread.
bench-qgemm: $(BUILD)/bench/bench_qgemm
	$(BUILD)/bench/bench_qgemm

# Generation: relattn_generate's tokens per second at batch 1 vs a PyTorch decoder with a
# key/value cache (same model, same threads; target: 2x), and its cost per new token at
# 16 and at 512 new tokens.
bench-generate: all
	$(PYTHON) tests/bench/bench_generate.py $(abspath $(SO)) && $(PYTHON) tests/bench/bench_generate_t5.py $(abspath $(SO))

# How soon sqlite3_interrupt stops each kind of call (target: under 1 s).
bench-interrupt: all
	$(PYTHON) tests/bench/bench_interrupt.py $(abspath $(SO))

bench: deps-bench
	$(MAKE) bench-attention bench-torch bench-forward bench-scan bench-interrupt \
	  bench-cluster bench-tokenize bench-deberta bench-qgemm bench-generate

# DeBERTa-v3-style and T5 encoders over a table: relattn_scan (embedding; label, prob) on the
# float32 model and its int8 and bf16 copies vs the same Hugging Face model in PyTorch (float32
# and int8) and, exported to ONNX, in ONNX Runtime (onnxruntime-node, from make deps-bench), same
# threads, tuned batches; a ratio table and the targets, PASS or FAIL each.
bench-deberta: all
	$(PYTHON) tests/bench/bench_deberta.py $(abspath $(SO))

# SentencePiece encoding: relattn vs python3-sentencepiece, one thread.
bench-tokenize: all
	$(PYTHON) tests/bench/bench_tokenize.py $(abspath $(SO))

# Install: the library where `.load relattn` finds it by bare name. The loader
# searches LIBDIR without any setting when it is one of its own directories
# (PREFIX=/usr: /usr/lib/<multiarch>); under /usr/local, LD_LIBRARY_PATH names
# it (README, "Install"). The Python module is told where the library is.
PREFIX     ?= /usr/local
MULTIARCH  := $(shell $(CC) -print-multiarch 2>/dev/null)
LIBDIR     ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/$(MULTIARCH),$(PREFIX)/lib)
DATADIR    ?= $(PREFIX)/share
PYVER      := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR  ?= $(PREFIX)/lib/python$(PYVER)/dist-packages
# The documentation keeps the repository's layout under DOCDIR, so that every
# link between its pages and to its pictures resolves in the installed copy.
DOCDIR     ?= $(DATADIR)/doc/relattn
DOCS       := README.md $(sort $(wildcard docs/*.md docs/*.svg docs/img/*.svg \
              docs/img/experiments/*.svg)) models/README.md \
              $(sort $(wildcard models/*/README.md))
INSTALLED  := $(LIBDIR)/relattn.so $(PYTHONDIR)/relattn/__init__.py \
              $(DATADIR)/relattn/tiny.safetensors $(DATADIR)/relattn/schema.sql \
              $(DATADIR)/relattn/score_corpus.sql $(addprefix $(DOCDIR)/,$(DOCS))

install: $(SO)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PYTHONDIR)/relattn $(DESTDIR)$(DATADIR)/relattn
	install -m 755 $(SO) $(DESTDIR)$(LIBDIR)/relattn.so
	sed 's|^_LIBDIR = None$$|_LIBDIR = "$(LIBDIR)"|' python/relattn/__init__.py \
	  > $(DESTDIR)$(PYTHONDIR)/relattn/__init__.py
	install -m 644 models/tiny.safetensors sql/schema.sql sql/score_corpus.sql \
	  $(DESTDIR)$(DATADIR)/relattn/
	for f in $(DOCS); do install -D -m 644 $$f $(DESTDIR)$(DOCDIR)/$$f || exit 1; done
	@echo "installed $(DESTDIR)$(LIBDIR)/relattn.so"
	@case "$(LIBDIR)" in /lib/$(MULTIARCH)|/usr/lib/$(MULTIARCH)|/lib|/usr/lib) ;; \
	  *) echo "for .load relattn from any directory: export LD_LIBRARY_PATH=$(LIBDIR)";; esac

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	rm -rf $(DESTDIR)$(PYTHONDIR)/relattn/__pycache__
	-rmdir $(DESTDIR)$(PYTHONDIR)/relattn $(DESTDIR)$(DATADIR)/relattn \
	  $(DESTDIR)$(DOCDIR)/docs/img/experiments $(DESTDIR)$(DOCDIR)/docs/img \
	  $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(DOCDIR)/models $(DESTDIR)$(DOCDIR) 2>/dev/null

clean:
	rm -rf $(BUILD) build-asan build-fuzz $(SO) demo.db hf-demo.db t5-demo.db
