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

# Test programs: every tests/LAYER/test_*.c (LAYER: core for wsync.h, rdma
# for wsync_rdma.h, http for wsync_http.h), each a single translation unit
# built as $(BUILD)/test_NAME, so NAME is unique across the layers
# (test_exhaustive runs on its own: make test-exhaustive; test_http needs
# libcurl and a server: tests/http/test_http.sh starts nginx and runs it;
# test_s3 likewise with s3rver: tests/http/test_s3.sh). Shared by every
# layer, in tests/: check.h (the CHECK macros), small_model.h (a small
# training-like model), impl.c, impl_of.sh, run.sh.
TEST_LAYERS := core rdma http
TEST_SRCS  := $(foreach l,$(TEST_LAYERS),$(wildcard tests/$(l)/test_*.c))
test_src    = $(firstword $(foreach l,$(TEST_LAYERS),$(wildcard tests/$(l)/$(1).c)))
TESTS      := $(filter-out test_exhaustive test_http test_s3 test_webdav test_s3_limits,$(basename $(notdir $(TEST_SRCS))))
TEST_BINS  := $(TESTS:%=$(BUILD)/%)
SAN_BINS   := $(TESTS:%=$(BUILD)/san/%)
FUZZERS    := $(patsubst fuzz/%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_DIRS  := $(FUZZERS:fuzz_%=fuzz/corpus/%)

.PHONY: all deps test test-build test-run test-exhaustive bench bench-apply bench-simd bench-fanout bench-probe bench-schedule bench-dir bench-pullmem fuzz fuzz-run demo clean FORCE python bench-python bench-engine

all: $(BUILD)/wsync

$(BUILD) $(BUILD)/san $(BUILD)/fuzz:
	mkdir -p $@

$(CONFIG): FORCE | $(BUILD)
	@printf '%s\n' $(CONFIG_LINES) > $@.tmp.$$$$ && \
	    if cmp -s $@.tmp.$$$$ $@; then rm -f $@.tmp.$$$$; else mv -f $@.tmp.$$$$ $@; fi

# The tool: every tool/*.c (tool/cli.h says which holds what), compiled and
# linked by one compiler run; tool/impl.c holds the headers' implementations.
TOOL_SRCS := $(sort $(wildcard tool/*.c))
TOOL_DEPS := $(TOOL_SRCS) $(wildcard tool/*.h) $(HEADERS) $(CONFIG)

$(BUILD)/wsync: $(TOOL_DEPS) | $(BUILD)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(CLI_HTTP) -I. -o $@ $(TOOL_SRCS) $(LIBS) $(CURL_LIBS)

# The tool under ASan+UBSan, for the multi-process push-demo tests.
$(BUILD)/san/wsync: $(TOOL_DEPS) | $(BUILD)/san
	$(CC) $(STD) $(WARN) $(SAN) $(CLI_HTTP) -I. -o $@ $(TOOL_SRCS) $(LIBS) $(CURL_LIBS)

# Small complete programs that show how to vendor wsync (the README's
# snippets in full), each one file; tests/cli/test_examples.sh runs them.
EXAMPLES     := trainer engine direct
EXAMPLE_BINS := $(EXAMPLES:%=$(BUILD)/example_%)

$(BUILD)/example_%: examples/%.c $(HEADERS) | $(BUILD)
	$(CC) $(STD) $(WARN) $(CFLAGS) -I. -o $@ $< -pthread $(LIBS)

# make examples: build them without make test (a .PHONY target: examples/ is
# also a directory); README.md, "The chain", shows how to run them.
.PHONY: examples
examples: $(EXAMPLE_BINS)

# Some tests and benches include the generator, tool/wsync_gen.h.
GEN_HEADER := tool/wsync_gen.h

# The headers' implementations, compiled once per configuration, plain and
# under ASan+UBSan, from tests/impl.c: core (wsync.h), http (wsync_http.h),
# httpnc (wsync_http.h with WSYNC_HTTP_NO_CURL), rdma (wsync_rdma.h). Each
# test program and fuzz replay driver links those that tests/impl_of.sh
# says it can take (not those whose internals it names, none when it
# defines a WSYNC_ configuration macro) and is compiled with
# WSYNC__IMPLEMENTED and the companions' like macros, so that its own
# "#define WSYNC_IMPLEMENTATION" emits nothing twice; the rest of the
# implementations is compiled in its translation unit as before. A test
# named in OWN_IMPL compiles every implementation itself.
OWN_IMPL  :=
IMPL_NAMES := core http httpnc rdma
IMPL_DEFS_http   := -DIMPL_HTTP
IMPL_DEFS_httpnc := -DIMPL_HTTP -DWSYNC_HTTP_NO_CURL
IMPL_DEFS_rdma   := -DIMPL_RDMA

IMPL_OBJS  := $(IMPL_NAMES:%=$(BUILD)/impl/%.o) $(IMPL_NAMES:%=$(BUILD)/san/impl/%.o)
.SECONDARY: $(IMPL_OBJS)

$(BUILD)/impl $(BUILD)/san/impl:
	mkdir -p $@

$(BUILD)/impl/%.o: tests/impl.c $(HEADERS) | $(BUILD)/impl
	$(CC) $(STD) $(WARN) $(CFLAGS) $(IMPL_DEFS_$*) -I. -c -o $@ $<

$(BUILD)/san/impl/%.o: tests/impl.c $(HEADERS) | $(BUILD)/san/impl
	$(CC) $(STD) $(WARN) $(SAN) $(IMPL_DEFS_$*) -I. -c -o $@ $<

# impl_of(source): tests/impl_of.sh's words for it, asked once per make run;
# then, of those words, the objects under a build directory, the macros
# that leave them out of the source's translation unit, and libcurl (with
# the configuration it was detected in).
impl_of = $(or $(IMPL_OF_$(1)),$(eval IMPL_OF_$(1) := $(if $(filter $(OWN_IMPL),$(basename $(notdir $(1)))),$(or $(filter curl,$(shell tests/impl_of.sh $(1))),none),$(shell tests/impl_of.sh $(1))))$(IMPL_OF_$(1)))
impl_objs = $(patsubst %,$(1)/impl/%.o,$(filter $(IMPL_NAMES),$(2)))
impl_defs = $(if $(filter core,$(1)),-DWSYNC__IMPLEMENTED) $(if $(filter http httpnc,$(1)),-DWSYNC__HTTP_IMPLEMENTED) $(if $(filter rdma,$(1)),-DWSYNC__RDMA_IMPLEMENTED)
impl_libs = $(if $(filter curl,$(1)),$(CURL_LIBS))
impl_deps = $(call impl_objs,$(1),$(call impl_of,$(2))) $(if $(filter curl,$(call impl_of,$(2))),$(CONFIG))

.SECONDEXPANSION:

# link_test(flags, build dir, sources): a test program or replay driver, $<
# its test source, with the shared implementations it takes (the command
# printed, as make would); where that does not compile (a program that leaned
# on a system header the implementation includes, say), it is compiled again
# with every implementation in its own translation unit, as before, and the
# build says so.
link_test_cmd = $(CC) $(STD) $(WARN) $(1) $(call impl_defs,$(call impl_of,$<)) -I. -Itests -o $@ $(3) $(call impl_objs,$(2),$(call impl_of,$<)) $(LIBS) $(call impl_libs,$(call impl_of,$<))
define link_test
echo '$(call link_test_cmd,$(1),$(2),$(3))'; \
	if ! $(call link_test_cmd,$(1),$(2),$(3)) 2>$@.err; then \
	    echo "note: $< did not build with the shared implementations ($$(grep -m 1 -E 'error|undefined' $@.err)); compiling them in it"; \
	    echo '$(CC) $(STD) $(WARN) $(1) -I. -o $@ $(3) $(LIBS) $(call impl_libs,$(call impl_of,$<))'; \
	    $(CC) $(STD) $(WARN) $(1) -I. -Itests -o $@ $(3) $(LIBS) $(call impl_libs,$(call impl_of,$<)) || { rm -f $@.err; exit 1; }; \
	else cat $@.err >&2; fi; rm -f $@.err
endef

# Every test program, one source file (the HTTP, S3 and WebDAV ones link
# libcurl; their scripts start the servers they run against).
$(BUILD)/test_%: $$(call test_src,test_$$*) tests/check.h tests/small_model.h $(HEADERS) $(GEN_HEADER) $$(call impl_deps,$(BUILD),$$(call test_src,test_$$*)) | $(BUILD)
	@$(call link_test,$(CFLAGS),$(BUILD),$<)

$(BUILD)/san/test_%: $$(call test_src,test_$$*) tests/check.h tests/small_model.h $(HEADERS) $(GEN_HEADER) $$(call impl_deps,$(BUILD)/san,$$(call test_src,test_$$*)) | $(BUILD)/san
	@$(call link_test,$(SAN),$(BUILD)/san,$<)

# The replay driver runs every fuzz harness's saved inputs with any compiler.
$(BUILD)/replay_%: fuzz/fuzz_%.c fuzz/replay.c $(wildcard fuzz/*.h) $(HEADERS) $$(call impl_deps,$(BUILD),fuzz/fuzz_$$*.c) | $(BUILD)
	@$(call link_test,$(CFLAGS),$(BUILD),fuzz/replay.c $<)

$(BUILD)/san/replay_%: fuzz/fuzz_%.c fuzz/replay.c $(wildcard fuzz/*.h) $(HEADERS) $$(call impl_deps,$(BUILD)/san,fuzz/fuzz_$$*.c) | $(BUILD)/san
	@$(call link_test,$(SAN),$(BUILD)/san,fuzz/replay.c $<)

# The benches' target: this CPU's instructions everywhere (make bench-simd
# builds them without, in $(BUILD)/simd, for other machines).
BENCH_ARCH ?= -march=native
$(BUILD)/bench_http: bench/bench_http.c bench/bench_cpu.h $(HEADERS) $(CONFIG) | $(BUILD)
	$(CC) $(STD) $(WARN) -O3 -g $(BENCH_ARCH) -I. -o $@ $< $(LIBS) $(CURL_LIBS)

$(BUILD)/bench_%: bench/bench_%.c bench/bench_cpu.h $(HEADERS) $(GEN_HEADER) | $(BUILD)
	$(CC) $(STD) $(WARN) -O3 -g $(BENCH_ARCH) -I. -o $@ $< $(LIBS)

# The portable build of a bench (WSYNC_NO_SIMD: no SIMD paths, the same
# flags otherwise), run next to the SIMD one by make bench and bench-apply.
$(BUILD)/bench_%_portable: bench/bench_%.c bench/bench_cpu.h $(HEADERS) $(GEN_HEADER) | $(BUILD)
	$(CC) $(STD) $(WARN) -O3 -g $(BENCH_ARCH) -DWSYNC_NO_SIMD -I. -o $@ $< $(LIBS)

$(BUILD)/test_exhaustive: tests/core/test_exhaustive.c tests/check.h $(HEADERS) | $(BUILD)
	$(CC) $(STD) $(WARN) -O3 -g -I. -Itests -o $@ $< $(LIBS)

# The Python binding (python/wsync, ctypes only): make python builds its
# shared library from python/wsync/_capi.c (URL stores when libcurl is here);
# then PYTHONPATH=python python3 -c 'import wsync' works from here.
PY_HTTP := $(if $(HAVE_CURL),-DWSPY_HTTP=1,)
$(BUILD)/libwsync.so: python/wsync/_capi.c $(HEADERS) $(CONFIG) | $(BUILD)
	$(CC) $(STD) $(WARN) $(CFLAGS) -fPIC -shared $(PY_HTTP) -I. -o $@ $< $(LIBS) $(CURL_LIBS)

python: $(BUILD)/libwsync.so

# The binding against C, and wsync's diff against torch's (!=, nonzero, gather).
bench-python: $(BUILD)/libwsync.so $(BUILD)/bench_probe
	WSYNC_LIB=$(BUILD)/libwsync.so PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 bench/bench_python.py $(BENCH_PYTHON_ARGS)

# make bench-engine: a tensor-parallel rank's pause at Qwen3-0.6B's shapes
# (bench/bench_engine.py): the take through the engine map against
# load_weights and load_state_dict (BENCH_ENGINE_ARGS: --layers, --device cuda)
bench-engine: $(BUILD)/libwsync.so
	WSYNC_LIB=$(BUILD)/libwsync.so PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 bench/bench_engine.py $(BENCH_ENGINE_ARGS)

# Every test, in the plain build and under ASan+UBSan, plus the headers
# compiled as C99 and C++ by gcc and clang, plus the CLI's exit codes.
deps:
	@tests/install-deps.sh

# The programs are built in parallel first (one job per core), then run.
TEST_PROGRAMS := $(BUILD)/wsync $(BUILD)/san/wsync $(TEST_BINS) $(SAN_BINS) $(BUILD)/test_http \
      $(BUILD)/san/test_http $(BUILD)/test_s3 $(BUILD)/san/test_s3 $(BUILD)/test_webdav $(BUILD)/san/test_webdav \
      $(BUILD)/test_s3_limits $(BUILD)/san/test_s3_limits \
      $(BUILD)/bench_apply $(BUILD)/libwsync.so $(EXAMPLE_BINS) $(FUZZERS:fuzz_%=$(BUILD)/replay_%) $(FUZZERS:fuzz_%=$(BUILD)/san/replay_%)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) test-build
	@$(MAKE) --no-print-directory test-run

test-build: $(TEST_PROGRAMS)

# tests/run.sh runs TEST_JOBS commands at a time (one more than the cores:
# several tests wait on servers and timers), started in this order (the
# longest first), and prints each one's lines as it finishes, with its wall
# and CPU time.
TEST_JOBS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
test-run: $(TEST_PROGRAMS)
	@TEST_JOBS=$(TEST_JOBS) tests/run.sh tests \
	    "tests/core/test_headers.sh gcc" \
	    "tests/core/test_headers.sh clang" \
	    "tests/http/test_http.sh $(BUILD)/test_http $(BUILD)/san/test_http $(BUILD)/wsync" \
	    "tests/cli/test_cli_edge.sh $(BUILD)/san/wsync" \
	    "tests/cli/test_push.sh $(BUILD)/san/wsync" \
	    "tests/cli/test_cli_edge.sh $(BUILD)/wsync" \
	    "tests/cli/test_push.sh $(BUILD)/wsync" \
	    "tests/cli/test_cli_dir.sh $(BUILD)/wsync" \
	    "tests/cli/test_dir_stress.sh $(BUILD)/wsync" \
	    "tests/python/test_python.sh $(BUILD)/libwsync.so $(BUILD)/wsync" \
	    "tests/python/test_python_install.sh" \
	    "tests/http/test_rclone.sh $(BUILD)/wsync" \
	    "tests/cli/test_cli_safety.sh $(BUILD)/san/wsync" \
	    "tests/cli/test_cli_safety.sh $(BUILD)/wsync" \
	    "tests/http/test_s3.sh $(BUILD)/test_s3 $(BUILD)/san/test_s3 $(BUILD)/wsync" \
	    "tests/cli/test_cli_chain.sh $(BUILD)/wsync" \
	    "tests/cli/test_cli_sign.sh $(BUILD)/wsync $(BUILD)/libwsync.so" \
	    "tests/http/test_fanout.sh $(BUILD)/wsync" \
	    "tests/core/test_build_config.sh" \
	    "tests/cli/test_readme.sh $(BUILD)/wsync" \
	    "tests/http/test_s3_limits.sh $(BUILD)/test_s3_limits $(BUILD)/san/test_s3_limits $(BUILD)/wsync" \
	    "tests/http/test_webdav.sh $(BUILD)/test_webdav $(BUILD)/san/test_webdav" \
	    $(SAN_BINS) \
	    $(TEST_BINS) \
	    $(foreach f,$(FUZZERS:fuzz_%=%),"$(BUILD)/san/replay_$(f) fuzz/corpus/$(f) fuzz/data/$(f)") \
	    $(foreach f,$(FUZZERS:fuzz_%=%),"$(BUILD)/replay_$(f) fuzz/corpus/$(f) fuzz/data/$(f)") \
	    "tests/cli/test_cli.sh $(BUILD)/wsync" \
	    "tests/cli/test_examples.sh $(EXAMPLE_BINS)" \
	    "tests/cli/test_plan_cli.sh $(BUILD)/wsync" \
	    "tests/cli/test_bench_apply.sh $(BUILD)/bench_apply $(BUILD)/wsync" \
	    "tests/cli/test_tool_cycles.sh" \
	    "tests/core/test_toc.sh"

# All 2^32 float bit patterns through f32->bf16, against PyTorch's results.
test-exhaustive: $(BUILD)/test_exhaustive
	@tests/run.sh exhaustive $(BUILD)/test_exhaustive

# BENCH_MODEL/BENCH_STEPS: the generated model and steps bench_delta measures.
# bench_delta and bench_apply run twice: the SIMD build (every path side by
# side, and AUTO's choice) and the portable one (WSYNC_NO_SIMD); each output
# opens with the CPU's model and SIMD flags.
BENCH_MODEL ?= qwen3-0.6b
BENCH_STEPS ?= 3
bench: $(BUILD)/wsync $(BUILD)/bench_parse $(BUILD)/bench_delta $(BUILD)/bench_delta_portable $(BUILD)/bench_chain $(BUILD)/bench_http $(BUILD)/bench_fabric $(BUILD)/bench_quant $(BUILD)/bench_probe
	@$(MAKE) --no-print-directory bench-probe
	$(BUILD)/bench_parse
	$(BUILD)/bench_delta $(BENCH_MODEL) $(BENCH_STEPS)
	$(BUILD)/bench_delta_portable $(BENCH_MODEL) $(BENCH_STEPS)
	@$(MAKE) --no-print-directory bench-apply
	$(BUILD)/bench_chain $(BENCH_MODEL) $(BENCH_STEPS)
	bench/bench_http.sh $(BUILD)/bench_http
	@$(MAKE) --no-print-directory bench-fanout
	$(BUILD)/bench_fabric
	$(BUILD)/bench_quant
	$(BUILD)/wsync push-demo --model qwen3-0.6b --trainers 4 --inference 2 --steps 5 --bench
	$(BUILD)/bench_mirror qwen3-0.6b 2 11
	rm -rf $(BUILD)/bench-boundmem && mkdir -p $(BUILD)/bench-boundmem && $(BUILD)/bench_boundmem publish $(BUILD)/bench-boundmem
	for m in fresh spool follow; do $(BUILD)/bench_boundmem pull $(BUILD)/bench-boundmem $$m || exit 1; done
	rm -rf $(BUILD)/bench-boundmem
	@$(MAKE) --no-print-directory bench-pullmem
# the mirror's engine pause and apply speed (ratios to a plain apply, one
# run), and the peak memory of anchor pulls and a follow (ratios to the model)
bench: $(BUILD)/bench_mirror $(BUILD)/bench_boundmem

# AUTO's choice of SIMD paths: the probe's margins, then the choice in 20
# fresh processes as the machine is and 20 beside a memory hog; exits 1 if
# they differ (bench/bench_probe.sh).
bench-probe: $(BUILD)/bench_probe
	bench/bench_probe.sh $(BUILD)/bench_probe 20

# 64 wsync follow processes on one nginx bucket (limit_conn refusals, a
# restart), 20 steps: tests/http/test_fanout.sh at full size.
bench-fanout: $(BUILD)/wsync $(BUILD)/bench_probe
	bench/bench_fanout.sh $(BUILD)/wsync

# A Hugging Face checkpoint directory of a full-size model (qwen2.5-7b, 15 GB
# in four shards; BENCH_DIR_MODEL to change) published and pulled for three
# steps: wall time and peak RSS over the model's size; about 65 GB of disk.
BENCH_DIR_MODEL ?= qwen2.5-7b
bench-dir: $(BUILD)/wsync
	bench/bench_dir.sh $(BUILD)/wsync --model $(BENCH_DIR_MODEL)

# The tool's own peak memory on one file: `wsync publish` and `wsync pull` of
# a qwen3-0.6b file (1.19 GB) for steps 0..10 (an anchor, then deltas), and a
# pull of the step-0 file through all 10 deltas; about 5 GB of disk.
bench-pullmem: $(BUILD)/wsync
	bench/bench_dir.sh $(BUILD)/wsync --file --model qwen3-0.6b --steps 10 --work $(BUILD)/bench-pullmem

# push-demo --bench over a grid of 16 configurations (fabrics, trainer and
# inference counts, bf16 and fp8, mesh groups): measured step time over the
# simulator's prediction for the same plan, and the worst ratio.
bench-schedule: $(BUILD)/wsync $(BUILD)/bench_probe
	bench/bench_schedule.sh $(BUILD)/wsync

# The sparse step (issue 43): what a step changes (bf16 elements; fp8 bytes
# and scales per 128x128 tile) on the real trajectory and the generator's
# qwen3-0.6b, and its phases' rates here as ratios to memcpy, which
# wsync_rdma.h's WSYNC_PLAN_SPARSE_* constants hold (about 3 minutes).
.PHONY: bench-sparse
bench-sparse: $(BUILD)/bench_sparse
	$(BUILD)/bench_sparse

# The sparse step's simulator against push-demo --sparse on qwen3-0.6b, 4
# trainers to 2 inference ranks over CMA: the rates measured here (the wire,
# and bench_sparse --ranks: the phases as the ranks run them) before and
# after the run, measured over predicted per step kind and phase
# (bench/bench_sim_check.sh; about 5 minutes).
.PHONY: bench-sim-check
bench-sim-check: $(BUILD)/wsync $(BUILD)/bench_sparse $(BUILD)/bench_probe
	bench/bench_sim_check.sh $(BUILD)/wsync

# The SIMD figures of one machine in one short run (bench/bench_simd.sh:
# the CPU head, AUTO's choice in 20 processes, bench_delta and bench_apply,
# SIMD and portable builds). The binaries go to $(BUILD)/simd, built by the
# rules above without -march (every SIMD path is chosen at run time) and
# without libcurl, so that the folder can be carried to a machine lent for
# minutes and run there: bench/bench_simd.sh build/simd /tmp/wb. About 2.5 GB
# in $(BUILD)/simd/work while it runs.
SIMD_BINS := bench_delta bench_apply bench_probe bench_delta_portable bench_apply_portable wsync
bench-simd:
	$(MAKE) --no-print-directory BUILD=$(BUILD)/simd BENCH_ARCH= HAVE_CURL= $(SIMD_BINS:%=$(BUILD)/simd/%)
	bench/bench_simd.sh $(BUILD)/simd $(BUILD)/simd/work

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
bench-apply: $(BUILD)/bench_apply $(BUILD)/bench_apply_portable $(BENCH_DIR)/$(BENCH_MODEL)-1.st $(BENCH_ENCODINGS:%=$(BENCH_DIR)/$(BENCH_MODEL).%)
	@for e in $(BENCH_ENCODINGS); do for b in bench_apply bench_apply_portable; do \
	    $(BUILD)/$$b $(BENCH_DIR)/$(BENCH_MODEL)-1.st $(BENCH_DIR)/$(BENCH_MODEL).$$e || exit 1; done; done

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
	        | grep -E 'INFO: Seed|DONE|invariant violated|#[0-9]+ 0x[0-9a-f]+ in (wsync|fz_|LLVMFuzzerTestOneInput)|stat::number_of_executed_units|stat::average_exec_per_sec|ERROR|SUMMARY|Test unit written|artifact'; \
	done

# The main job: a trainer and an inference follower, two processes, qwen3-0.6b
# (1.2 GB bf16), step 0 and 10 training steps through $(BUILD)/demo-bucket
# (make clean removes it); README.md gives a measured time.
demo:
	@tests/install-deps.sh --build
	@$(MAKE) --no-print-directory $(BUILD)/wsync
	$(BUILD)/wsync demo --bucket $(BUILD)/demo-bucket

clean:
	rm -rf $(BUILD)
