# libFuzzer harnesses (clang): t/fuzz/fuzz_*.c against an engine built with clang under
# ASan + UBSan in build-fuzz/. Seed corpora in t/fuzz/corpus/<harness>/.
#   make fuzz                 build them (build-fuzz/fuzz/fuzz_*)
#   make fuzz-smoke           each for SRT_FUZZ_SECONDS (10) on its corpus: CI
#   SRT_FUZZ_RUNS=1000000 make fuzz-smoke   the soak: at least 10^6 executions each
# A crash found becomes a regression input: copy it into the harness's corpus.
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
	@set -e; for f in $(FUZZ_NAMES); do \
	    mkdir -p $(FUZZ_BUILD)/work/$$f; \
	    if ! $(FUZZ_BUILD)/fuzz/$$f -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
	        $${SRT_FUZZ_RUNS:+-runs=$$SRT_FUZZ_RUNS} \
	        $${SRT_FUZZ_RUNS:--max_total_time=$${SRT_FUZZ_SECONDS:-10}} \
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
                  test_radix test_kvalloc test_chat_template test_sampling

.PHONY: sanitize-check
sanitize-check: $(FUZZ_BUILD)/libsrt.a
	$(MAKE) SRT_IN_FUZZ_BUILD=1 CC=$(FUZZ_CC) BUILD=$(FUZZ_BUILD) \
	    OPT="-O1 -g $(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(SAN_UNIT_TESTS:%=$(FUZZ_BUILD)/t/%)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    prove --exec '' $(SAN_UNIT_TESTS:%=$(FUZZ_BUILD)/t/%)
	$(MAKE) fuzz-smoke
