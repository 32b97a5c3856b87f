# wsync: `make` builds build/wsync; `make test` runs every test and ends with
# "summary: N passed, M failed"; see README.md for the rest.
SHELL   := /bin/bash
CC      ?= cc
CXX     ?= c++
CLANG   ?= clang
CFLAGS  ?= -O2 -g
WARN    := -Wall -Wextra -Wpedantic -Werror
STD     := -std=c99
LIBS    := -lm -lpthread
BUILD   ?= build
SAN     := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_SECONDS ?= 60
HEADERS := wsync.h wsync_http.h wsync_rdma.h
# libcurl (wsync_http.h): the tool takes http:// stores only when its
# development files are here; tests/install-deps.sh installs them for make test.
HAVE_CURL := $(shell pkg-config --exists libcurl 2>/dev/null && echo 1)
CURL_LIBS := $(if $(HAVE_CURL),$(shell pkg-config --libs libcurl),)
CLI_HTTP  := $(if $(HAVE_CURL),-DWSYNC_CLI_HTTP=1,)
# What was detected, recorded in $(CONFIG) and rewritten only when it changes
# (compare, then replace), so that what was built under another configuration
# is built again (make demo before make test installs libcurl) and nothing
# else is. Whatever depends on a detected option depends on $(CONFIG).
CONFIG    := $(BUILD)/config.mk
CONFIG_LINES := 'HAVE_CURL := $(HAVE_CURL)' 'CURL_LIBS := $(CURL_LIBS)' 'CLI_HTTP := $(CLI_HTTP)'

# Test programs: every tests/test_*.c, each a single translation unit
# (test_exhaustive runs on its own: make test-exhaustive; test_http needs
# libcurl and a server: tests/test_http.sh starts nginx and runs it;
# test_s3 likewise with s3rver: tests/test_s3.sh).
TESTS      := $(filter-out test_exhaustive test_http test_s3,$(patsubst tests/%.c,%,$(wildcard tests/test_*.c)))
TEST_BINS  := $(TESTS:%=$(BUILD)/%)
SAN_BINS   := $(TESTS:%=$(BUILD)/san/%)
FUZZERS    := $(patsubst fuzz/%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_DIRS  := $(FUZZERS:fuzz_%=fuzz/corpus/%)

.PHONY: all deps test test-build test-run test-exhaustive bench bench-apply fuzz fuzz-run demo clean FORCE

all: $(BUILD)/wsync

$(BUILD) $(BUILD)/san $(BUILD)/fuzz:
	mkdir -p $@

$(CONFIG): FORCE | $(BUILD)
	@printf '%s\n' $(CONFIG_LINES) > $@.tmp.$$$$ && \
	    if cmp -s $@.tmp.$$$$ $@; then rm -f $@.tmp.$$$$; else mv -f $@.tmp.$$$$ $@; fi

$(BUILD)/wsync: examples/wsync.c examples/wsync_gen.h examples/wsync_push.h examples/wsync_plan.h $(HEADERS) $(CONFIG) | $(BUILD)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(CLI_HTTP) -Iexamples -I. -o $@ examples/wsync.c $(LIBS) $(CURL_LIBS)

# The tool under ASan+UBSan, for the multi-process push-demo tests.
$(BUILD)/san/wsync: examples/wsync.c examples/wsync_gen.h examples/wsync_push.h examples/wsync_plan.h $(HEADERS) $(CONFIG) | $(BUILD)/san
	$(CC) $(STD) $(WARN) $(SAN) $(CLI_HTTP) -Iexamples -I. -o $@ examples/wsync.c $(LIBS) $(CURL_LIBS)

# The HTTP store's tests link libcurl (tests/test_http.sh runs them against nginx).
$(BUILD)/test_http: tests/test_http.c tests/check.h $(HEADERS) $(CONFIG) | $(BUILD)
	$(CC) $(STD) $(WARN) $(CFLAGS) -I. -o $@ $< $(LIBS) $(CURL_LIBS)

$(BUILD)/san/test_http: tests/test_http.c tests/check.h $(HEADERS) $(CONFIG) | $(BUILD)/san
	$(CC) $(STD) $(WARN) $(SAN) -I. -o $@ $< $(LIBS) $(CURL_LIBS)

# The S3 store's tests, the same way (tests/test_s3.sh runs them against s3rver).
$(BUILD)/test_s3: tests/test_s3.c tests/check.h $(HEADERS) $(CONFIG) | $(BUILD)
	$(CC) $(STD) $(WARN) $(CFLAGS) -I. -o $@ $< $(LIBS) $(CURL_LIBS)

$(BUILD)/san/test_s3: tests/test_s3.c tests/check.h $(HEADERS) $(CONFIG) | $(BUILD)/san
	$(CC) $(STD) $(WARN) $(SAN) -I. -o $@ $< $(LIBS) $(CURL_LIBS)

# Small complete programs that show how to vendor wsync (the README's
# snippets in full), each one file; tests/test_examples.sh runs them.
EXAMPLES     := trainer engine direct
EXAMPLE_BINS := $(EXAMPLES:%=$(BUILD)/example_%)

$(BUILD)/example_%: examples/%.c $(HEADERS) | $(BUILD)
	$(CC) $(STD) $(WARN) $(CFLAGS) -I. -o $@ $< -pthread $(LIBS)

# Some tests include the CLI's headers under examples/ too.
EXAMPLE_HEADERS := $(wildcard examples/*.h)

$(BUILD)/test_%: tests/test_%.c tests/check.h $(HEADERS) $(EXAMPLE_HEADERS) | $(BUILD)
	$(CC) $(STD) $(WARN) $(CFLAGS) -I. -o $@ $< $(LIBS)

$(BUILD)/san/test_%: tests/test_%.c tests/check.h $(HEADERS) $(EXAMPLE_HEADERS) | $(BUILD)/san
	$(CC) $(STD) $(WARN) $(SAN) -I. -o $@ $< $(LIBS)

# The replay driver runs every fuzz harness's saved inputs with any compiler.
$(BUILD)/replay_%: fuzz/fuzz_%.c fuzz/replay.c $(wildcard fuzz/*.h) $(HEADERS) | $(BUILD)
	$(CC) $(STD) $(WARN) $(CFLAGS) -I. -o $@ fuzz/replay.c $< $(LIBS)

$(BUILD)/san/replay_%: fuzz/fuzz_%.c fuzz/replay.c $(wildcard fuzz/*.h) $(HEADERS) | $(BUILD)/san
	$(CC) $(STD) $(WARN) $(SAN) -I. -o $@ fuzz/replay.c $< $(LIBS)

$(BUILD)/bench_http: tests/bench_http.c $(HEADERS) $(CONFIG) | $(BUILD)
	$(CC) $(STD) $(WARN) -O3 -g -march=native -I. -o $@ $< $(LIBS) $(CURL_LIBS)

$(BUILD)/bench_%: tests/bench_%.c $(HEADERS) examples/wsync_gen.h | $(BUILD)
	$(CC) $(STD) $(WARN) -O3 -g -march=native -I. -o $@ $< $(LIBS)

$(BUILD)/test_exhaustive: tests/test_exhaustive.c tests/check.h $(HEADERS) | $(BUILD)
	$(CC) $(STD) $(WARN) -O3 -g -I. -o $@ $< $(LIBS)

# Every test, in the plain build and under ASan+UBSan, plus the headers
# compiled as C99 and C++ by gcc and clang, plus the CLI's exit codes.
deps:
	@tests/install-deps.sh

# The programs are built in parallel first (one job per core), then run.
TEST_PROGRAMS := $(BUILD)/wsync $(BUILD)/san/wsync $(TEST_BINS) $(SAN_BINS) $(BUILD)/test_http \
      $(BUILD)/san/test_http $(BUILD)/test_s3 $(BUILD)/san/test_s3 \
      $(BUILD)/bench_apply $(EXAMPLE_BINS) $(FUZZERS:fuzz_%=$(BUILD)/replay_%) $(FUZZERS:fuzz_%=$(BUILD)/san/replay_%)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) test-build
	@$(MAKE) --no-print-directory test-run

test-build: $(TEST_PROGRAMS)

test-run: $(TEST_PROGRAMS)
	@tests/run.sh tests \
	    $(TEST_BINS) \
	    $(SAN_BINS) \
	    $(foreach f,$(FUZZERS:fuzz_%=%),"$(BUILD)/replay_$(f) fuzz/corpus/$(f) fuzz/data/$(f)") \
	    $(foreach f,$(FUZZERS:fuzz_%=%),"$(BUILD)/san/replay_$(f) fuzz/corpus/$(f) fuzz/data/$(f)") \
	    "tests/test_headers.sh" \
	    "tests/test_toc.sh" \
	    "tests/test_build_config.sh" \
	    "tests/test_cli.sh $(BUILD)/wsync" \
	    "tests/test_bench_apply.sh $(BUILD)/bench_apply $(BUILD)/wsync" \
	    "tests/test_cli_chain.sh $(BUILD)/wsync" \
	    "tests/test_examples.sh $(EXAMPLE_BINS)" \
	    "tests/test_cli_safety.sh $(BUILD)/wsync" \
	    "tests/test_cli_safety.sh $(BUILD)/san/wsync" \
	    "tests/test_push.sh $(BUILD)/wsync" \
	    "tests/test_push.sh $(BUILD)/san/wsync" \
	    "tests/test_plan_cli.sh $(BUILD)/wsync" \
	    "tests/test_http.sh $(BUILD)/test_http $(BUILD)/san/test_http $(BUILD)/wsync" \
	    "tests/test_s3.sh $(BUILD)/test_s3 $(BUILD)/san/test_s3 $(BUILD)/wsync"

# All 2^32 float bit patterns through f32->bf16, against PyTorch's results.
test-exhaustive: $(BUILD)/test_exhaustive
	@tests/run.sh exhaustive $(BUILD)/test_exhaustive

# BENCH_MODEL/BENCH_STEPS: the generated model and steps bench_delta measures.
BENCH_MODEL ?= qwen3-0.6b
BENCH_STEPS ?= 3
bench: $(BUILD)/wsync $(BUILD)/bench_parse $(BUILD)/bench_delta $(BUILD)/bench_chain $(BUILD)/bench_http $(BUILD)/bench_fabric
	$(BUILD)/bench_parse
	$(BUILD)/bench_delta $(BENCH_MODEL) $(BENCH_STEPS)
	@$(MAKE) --no-print-directory bench-apply
	$(BUILD)/bench_chain $(BENCH_MODEL) $(BENCH_STEPS)
	tests/bench_http.sh $(BUILD)/bench_http
	$(BUILD)/bench_fabric
	$(BUILD)/wsync push-demo --model qwen3-0.6b --trainers 4 --inference 2 --steps 5 --bench

# bench_apply on files the tool wrote: steps 1 and 2 of BENCH_MODEL (2.4 GB
# for qwen3-0.6b, kept in build/bench) and their delta in each encoding,
# each applied next to a bare scatter of the same changes.
BENCH_DIR := $(BUILD)/bench
BENCH_ENCODINGS := packed packed-max trl-v1 trl-v3
$(BENCH_DIR):
	mkdir -p $@
$(BENCH_DIR)/$(BENCH_MODEL)-%.st: | $(BUILD)/wsync $(BENCH_DIR)
	$(BUILD)/wsync gen --model $(BENCH_MODEL) --step $* -o $@
$(BENCH_DIR)/$(BENCH_MODEL).%: $(BENCH_DIR)/$(BENCH_MODEL)-1.st $(BENCH_DIR)/$(BENCH_MODEL)-2.st $(BUILD)/wsync
	$(BUILD)/wsync diff $(BENCH_DIR)/$(BENCH_MODEL)-1.st $(BENCH_DIR)/$(BENCH_MODEL)-2.st -o $@ --encoding $*
.SECONDARY: $(BENCH_DIR)/$(BENCH_MODEL)-1.st $(BENCH_DIR)/$(BENCH_MODEL)-2.st
bench-apply: $(BUILD)/bench_apply $(BENCH_DIR)/$(BENCH_MODEL)-1.st $(BENCH_ENCODINGS:%=$(BENCH_DIR)/$(BENCH_MODEL).%)
	@for e in $(BENCH_ENCODINGS); do \
	    $(BUILD)/bench_apply $(BENCH_DIR)/$(BENCH_MODEL)-1.st $(BENCH_DIR)/$(BENCH_MODEL).$$e || exit 1; done

# libFuzzer (clang); each harness runs FUZZ_SECONDS on a scratch copy of its
# corpus so the committed seeds stay as they are. Crashes land in build/fuzz.
$(BUILD)/fuzz/fuzz_%: fuzz/fuzz_%.c $(wildcard fuzz/*.h) $(HEADERS) | $(BUILD)/fuzz
	$(CLANG) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I. -o $@ $<

fuzz: deps
	@$(MAKE) --no-print-directory fuzz-run

fuzz-run: $(FUZZERS:%=$(BUILD)/fuzz/%)
	@set -eo pipefail; for f in $(FUZZERS); do \
	    name=$${f#fuzz_}; work=$(BUILD)/fuzz/work_$$name; mkdir -p $$work; \
	    echo "fuzz: $$f for $(FUZZ_SECONDS)s"; \
	    $(BUILD)/fuzz/$$f -max_total_time=$(FUZZ_SECONDS) -dict=fuzz/$$name.dict \
	        -artifact_prefix=$(BUILD)/fuzz/ -print_final_stats=1 \
	        $$work fuzz/corpus/$$name fuzz/data/$$name 2>&1 \
	        | grep -E 'INFO: Seed|DONE|stat::number_of_executed_units|stat::average_exec_per_sec|ERROR|SUMMARY|Test unit written|artifact'; \
	done

# The main job: a trainer and an inference follower, two processes, qwen3-0.6b
# (1.2 GB bf16), 10 steps through ./demo-bucket; about a minute on 2 cores.
demo:
	@tests/install-deps.sh --build
	@$(MAKE) --no-print-directory $(BUILD)/wsync
	$(BUILD)/wsync demo

clean:
	rm -rf $(BUILD)
