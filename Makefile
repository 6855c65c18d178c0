# ngx_srt top-level build.
#
#   make            engine library, CLI tools, example hook libraries, unit tests
#   make test       install deps (idempotent), build everything, run unit + t/ suites
#   make run        install deps, fetch the default model, build the module, start nginx on 127.0.0.1:8080
#
# Each component appends to the variables below from its own src/<part>/part.mk,
# so parts can be developed without touching this file.

CC       ?= gcc
BUILD    ?= build
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fPIC -pthread \
            -Isrc/include -Isrc -MMD -MP
LDLIBS   += -lm -lpthread -ldl -lyajl -lpcre2-8

ENGINE_SRCS :=          # sources of libsrt (the engine; no nginx headers)
TOOLS       :=          # programs: $(BUILD)/bin/...
UNIT_TESTS  :=          # test programs printing TAP: $(BUILD)/t/...
EXTRA_ALL   :=          # anything else 'make' should build

include $(sort $(wildcard src/*/part.mk src/*/*/part.mk t/part.mk scripts/part.mk kernels/part.mk))

ENGINE_OBJS := $(ENGINE_SRCS:%.c=$(BUILD)/obj/%.o)
LIBSRT      := $(BUILD)/libsrt.a

# Only what a public header marks SRT_API leaves libsrt (src/include/srt/common.h).
$(ENGINE_OBJS): CFLAGS += -fvisibility=hidden

.PHONY: all test unit-test nginx-test run deps clean asan asan-test check-boundaries
all: $(LIBSRT) $(TOOLS) $(UNIT_TESTS) $(EXTRA_ALL)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CFLAGS_$(subst /,_,$(basename $<))) -c $< -o $@

$(LIBSRT): $(ENGINE_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/%: $(BUILD)/obj/src/cli/%.o $(LIBSRT)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIBSRT) $(LDLIBS)

$(BUILD)/t/%: $(BUILD)/obj/t/unit/%.o $(LIBSRT)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIBSRT) $(LDLIBS)

deps:
	scripts/install-deps.sh

check-boundaries: all
	scripts/check-boundaries.sh

unit-test: $(UNIT_TESTS)
	prove --exec '' $(UNIT_TESTS)

test: deps
	$(MAKE) all
	scripts/run-tests.sh

# ASan + UBSan: engine, CLI tools, unit tests and the nginx module in build-asan/ (the module
# runs only in an nginx started with LD_PRELOAD=$$(gcc -print-file-name=libasan.so)).
# asan-test runs every unit test under it; CI runs it (scripts/run-tests.sh, SRT_ASAN=0 skips).
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
asan:
	$(MAKE) BUILD=build-asan OPT="-O1 $(SAN_FLAGS)" NGX_SAN_FLAGS="$(SAN_FLAGS)" unit-build nginx-module

# the engine and the unit tests only (no CUDA kernels, no tools)
.PHONY: unit-build
unit-build: $(LIBSRT) $(UNIT_TESTS)

# ASAN_TEST_JOBS=2: two tests at a time (test_golden alone takes most of an hour under ASan on a
# loaded 2-core machine).
ASAN_TEST_JOBS ?= 1
asan-test: asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	prove -j$(ASAN_TEST_JOBS) --exec '' $(subst $(BUILD)/,build-asan/,$(UNIT_TESTS))

clean:
	rm -rf $(BUILD)

-include $(ENGINE_OBJS:.o=.d) $(wildcard $(BUILD)/obj/t/unit/*.d $(BUILD)/obj/src/cli/*.d)
