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

.PHONY: all test unit-test nginx-test run deps clean
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

unit-test: $(UNIT_TESTS)
	prove --exec '' $(UNIT_TESTS)

test: deps
	$(MAKE) all
	scripts/run-tests.sh

clean:
	rm -rf $(BUILD)

-include $(ENGINE_OBJS:.o=.d) $(wildcard $(BUILD)/obj/t/unit/*.d $(BUILD)/obj/src/cli/*.d)
