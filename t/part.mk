# Tests: the C unit tests (t/unit, TAP, run by scripts/run-tests.sh), the libraries they load,
# and the GPU test programs (t/gpu, run by scripts/gpu-check). Each t/unit/NAME.c is linked
# against libsrt.a by the pattern rule in the Makefile.

UNIT_TESTS += $(addprefix $(BUILD)/t/, \
    test_kvalloc test_radix \
    test_grammar test_grammar_xgr \
    test_comm test_nccl_comm \
    test_hooks test_hooks_examples test_hooks_model test_hook_admin test_hooks_per_request \
    test_hooks_activations \
    test_ipc \
    test_golden test_loader_gguf test_loader_safetensors test_model_runner test_model_tp \
    test_model_precise test_runner_devpath test_runner_graphs \
    test_sampling \
    test_sched test_sched_model test_sched_jump test_sched_serve test_tp_group \
    test_chat_template test_ucase test_output_parse \
    test_tokenizer test_tokenizer_errors \
    test_cpu_kernels)

# Fake NCCL (t/unit/fake_nccl/fake_nccl.c): libnccl.so.2's C entry points with NCCL's ABI over
# POSIX shared memory and host buffers, so the NCCL communicator runs in tests without a GPU
# (SRT_NCCL_SO_PATH=build/lib/libfake_nccl.so). The _nosym copy lacks ncclBroadcast.
FAKE_NCCL_LIBS := $(BUILD)/lib/libfake_nccl.so $(BUILD)/lib/libfake_nccl_nosym.so
EXTRA_ALL      += $(FAKE_NCCL_LIBS)
$(BUILD)/lib/libfake_nccl.so: t/unit/fake_nccl/fake_nccl.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -shared -o $@ $<
$(BUILD)/lib/libfake_nccl_nosym.so: t/unit/fake_nccl/fake_nccl.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -DFAKE_NCCL_OMIT_BROADCAST -shared -o $@ $<
CFLAGS_t_unit_test_nccl_comm := -DFAKE_NCCL_DIR='"$(abspath $(BUILD))/lib"' \
                                -DNCCL_GPU_TEST='"$(abspath $(BUILD))/t/gpu/test_nccl"'
$(BUILD)/t/test_nccl_comm: | $(FAKE_NCCL_LIBS) $(BUILD)/t/gpu/test_nccl

# Hook libraries written against the public header only, and the tests that dlopen them.
HOOK_TEST_LIBDIR := $(abspath $(BUILD))/t/hooklib
HOOK_TEST_LIBS   := $(BUILD)/t/hooklib/libtesthooks.so $(BUILD)/t/hooklib/libbadabi.so \
                    $(BUILD)/t/hooklib/libnoabi.so $(BUILD)/t/hooklib/libabi10.so
EXTRA_ALL += $(HOOK_TEST_LIBS)
$(BUILD)/t/hooklib/libtesthooks.so: t/unit/test_hooks_lib.c src/include/srt_hooks.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $< -lm
$(BUILD)/t/hooklib/libbadabi.so: t/unit/test_hooks_badabi.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $<
# built against the 1.0 header (t/unit/abi10/srt_hooks.h, found first: the source's directory)
$(BUILD)/t/hooklib/libabi10.so: t/unit/abi10/hook_abi10.c t/unit/abi10/srt_hooks.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $<
$(BUILD)/t/hooklib/libnoabi.so: t/unit/test_hooks_noabi.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $<
CFLAGS_t_unit_test_hooks := -DHOOK_TEST_LIBDIR='"$(HOOK_TEST_LIBDIR)"'
CFLAGS_t_unit_test_runner_graphs := -DHOOK_TEST_LIBDIR='"$(HOOK_TEST_LIBDIR)"'
$(BUILD)/t/test_runner_graphs: | $(HOOK_TEST_LIBS)
$(BUILD)/t/test_hooks: | $(HOOK_TEST_LIBS)
# the example libraries come from src/hooks/part.mk
CFLAGS_t_unit_test_hooks_examples := -DHOOK_EXAMPLE_LIBDIR='"$(abspath $(BUILD))/lib"'
$(BUILD)/t/test_hooks_examples: | $(HOOK_EXAMPLES)
CFLAGS_t_unit_test_hooks_model := -DHOOK_EXAMPLE_LIBDIR='"$(abspath $(BUILD))/lib"'
CFLAGS_t_unit_test_tp_group := -DHOOK_EXAMPLE_LIBDIR='"$(abspath $(BUILD))/lib"'
$(BUILD)/t/test_tp_group: | $(HOOK_EXAMPLES)
$(BUILD)/t/test_hooks_model: | $(HOOK_EXAMPLES)

# GPU tests and tools: plain C against libsrt.a (the CUDA plugin is dlopened), so they compile
# on every machine (`make` builds them: a compile check); they RUN only on a GPU machine,
# through scripts/gpu-check (test_nccl: stage nccl). Not in UNIT_TESTS.
GPU_TESTS := $(BUILD)/t/gpu/test_kernels $(BUILD)/t/gpu/gpu_generate $(BUILD)/t/gpu/test_nccl \
             $(BUILD)/t/gpu/test_device_hooks
EXTRA_ALL += $(GPU_TESTS)
$(BUILD)/t/gpu/%: t/gpu/%.c $(BUILD)/libsrt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libsrt.a $(LDLIBS)

.PHONY: gpu-tests
gpu-tests: $(GPU_TESTS) $(if $(NVCC),$(CUDA_PLUGIN))
-include $(GPU_TESTS:=.d)

# libFuzzer harnesses (clang): t/fuzz/fuzz_*.c against an engine built with clang under
# ASan + UBSan in build-fuzz/. Seed corpora in t/fuzz/corpus/<harness>/.
#   make fuzz                 build them (build-fuzz/fuzz/fuzz_*)
#   make fuzz-smoke           each for SRT_FUZZ_SECONDS (10) on its corpus: CI
#   SRT_FUZZ_RUNS=1000000 make fuzz-smoke   the soak: at least 10^6 executions each
# A crash found becomes a regression input: copy it into the harness's corpus.
# Soak at 3caa697 (build-fuzz/fuzz/$f -runs=1000000 -max_len=65536 -timeout=10 -rss_limit_mb=2048,
# nice 5, load average 7-11 on 2 cores): fuzz_json 10^6 in 55 s, fuzz_hook_spec 10^6 in 94 s,
# fuzz_chat_template 10^6 in 146 s, fuzz_tokenizer 10^6 in 337 s, all clean; fuzz_model_file
# (a file written per input, ~310 exec/s here) stopped clean at 119,122 runs in 379 s.
# Soak at 83e18c4..c53a93f (SRT_FUZZ_RUNS=1000000 nice -n 10 make fuzz-smoke FUZZ_NAMES=..., one
# process per harness, load average 7-16 on 2 cores shared with other builds and tests):
# fuzz_model_file, now parsing in memory, 10^6 in 132 s (7,575 exec/s), and again with the GGUF
# getters at c53a93f 10^6 in 170 s (5,882 exec/s); fuzz_output_parse 10^6 in 3,827 s (261 exec/s:
# its inputs grow to 2.8 KB); both clean. fuzz_grammar (new at 3b90b8b; c7de286's harness:
# build-fuzz/fuzz/fuzz_grammar -max_len=65536 -timeout=10 -rss_limit_mb=2048 -max_total_time=4200,
# nice -n 15) stopped clean at 192,749 runs in 3,686 s (52 exec/s: a fresh state's token mask walks
# the whole vocabulary under ASan and coverage): its 10^6 is still to run, about 5 h at that rate.
# make asan-test at 83e18c4 + db1cf1b (nice -n 10 make -j2 asan-test ASAN_TEST_JOBS=2, build
# included, SRT_MODEL_DIR set, load average 7-16): 2,988 s, 33 files, 4,181 tests; 31 clean, two
# not: test_loader_gguf (strndup of a key ending the input, under strict_string_checks: fixed in
# c96894b, build-asan/t/test_loader_gguf then clean, 35/35) and test_grammar_xgr (LeakSanitizer:
# the PDA's thread-local scratch of srt_grammar_precompute's helper threads, 4,352 bytes in 17
# blocks; h-gcomp frees it in pda_thread_done, so the fix lands with that branch). No clean run
# of the whole target in one go yet: the next one goes after h-gcomp's merge.
# make asan-test at b1c5d59 (all of h-gcomp, h-rel, h-tools2 and h-dups merged; nice -n 5 make -j2
# asan-test ASAN_TEST_JOBS=2, build included, paused ~20 min for a benchmark window, then load
# ~2-5): every unit test clean in one go, 33 files, 4,242 tests, 2,629 s wall.
# fuzz_grammar soak at b1c5d59 (after h-gcomp's shared caches made compile ~5x faster):
# build-fuzz/fuzz/fuzz_grammar -max_len=65536 -timeout=10 -rss_limit_mb=2048 -runs=500000
# -jobs=2 -workers=2 CORPUS t/fuzz/corpus/fuzz_grammar, nice -n 10, load ~2-3: 2 x 500,000 =
# 10^6 executions in 26 min (~330-360 exec/s per worker), clean; corpus grew to ~1,290 inputs.
FUZZ_CC      ?= clang
FUZZ_BUILD   := build-fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_NAMES   := $(basename $(notdir $(wildcard t/fuzz/fuzz_*.c)))
FUZZ_BINS    := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz/%)

.PHONY: fuzz fuzz-smoke
fuzz: $(FUZZ_BINS)

ifndef SRT_IN_FUZZ_BUILD
$(FUZZ_BUILD)/libsrt.a: FORCE_FUZZ_LIB
	$(MAKE) SRT_IN_FUZZ_BUILD=1 CC=$(FUZZ_CC) BUILD=$(FUZZ_BUILD) \
	    OPT="-O1 -g $(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(FUZZ_BUILD)/libsrt.a
endif

$(FUZZ_BUILD)/fuzz/%: t/fuzz/%.c $(FUZZ_BUILD)/libsrt.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -O1 -g $(FUZZ_SAN) -fsanitize=fuzzer -Isrc/include -Isrc -o $@ $< \
	    $(FUZZ_BUILD)/libsrt.a $(LDLIBS)

fuzz-smoke: fuzz
	@set -e; \
	if [ -n "$$SRT_FUZZ_RUNS" ]; then limit=-runs=$$SRT_FUZZ_RUNS; \
	else limit=-max_total_time=$${SRT_FUZZ_SECONDS:-10}; fi; \
	for f in $(FUZZ_NAMES); do \
	    mkdir -p $(FUZZ_BUILD)/work/$$f; \
	    if ! $(FUZZ_BUILD)/fuzz/$$f -max_len=65536 -timeout=10 -rss_limit_mb=2048 $$limit \
	        -print_final_stats=1 $(FUZZ_BUILD)/work/$$f t/fuzz/corpus/$$f \
	        > $(FUZZ_BUILD)/work/$$f.log 2>&1; then \
	        tail -n 60 $(FUZZ_BUILD)/work/$$f.log; echo "fuzz: $$f FAILED"; exit 1; fi; \
	    echo "fuzz: $$f ok, $$(grep -o 'number_of_executed_units: *[0-9]*' $(FUZZ_BUILD)/work/$$f.log)"; \
	done

.PHONY: FORCE_FUZZ_LIB
FORCE_FUZZ_LIB:

# CI (scripts/run-tests.sh): one clang build of the engine under ASan + UBSan serves the fast
# unit tests and the fuzzers; then each fuzzer runs SRT_FUZZ_SECONDS (10) on its corpus.
# `make asan-test` runs every unit test under gcc's ASan + UBSan instead (longer).
SAN_UNIT_TESTS := test_ipc test_tokenizer_errors test_loader_safetensors test_loader_gguf \
                  test_radix test_kvalloc test_chat_template test_sampling test_output_parse test_grammar

.PHONY: sanitize-check
sanitize-check: $(FUZZ_BUILD)/libsrt.a
	$(MAKE) SRT_IN_FUZZ_BUILD=1 CC=$(FUZZ_CC) BUILD=$(FUZZ_BUILD) \
	    OPT="-O1 -g $(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(SAN_UNIT_TESTS:%=$(FUZZ_BUILD)/t/%)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    prove --exec '' $(SAN_UNIT_TESTS:%=$(FUZZ_BUILD)/t/%)
	$(MAKE) fuzz-smoke
