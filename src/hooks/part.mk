# Forward hooks: spec parsing, matching, factory loading, registry, dispatch.
ENGINE_SRCS += src/hooks/dispatch.c src/hooks/tensor_util.c src/hooks/match.c \
               src/hooks/spec.c src/hooks/resolve.c src/hooks/host.c src/hooks/registry.c \
               src/hooks/admin.c src/hooks/per_request.c src/hooks/control_vector.c
UNIT_TESTS  += $(BUILD)/t/test_hook_admin

# Test hook libraries (t/unit/test_hooks_lib*.c) and the engine tests that dlopen them.
HOOK_TEST_LIBDIR := $(abspath $(BUILD))/t/hooklib
HOOK_TEST_LIBS   := $(BUILD)/t/hooklib/libtesthooks.so $(BUILD)/t/hooklib/libbadabi.so \
                    $(BUILD)/t/hooklib/libnoabi.so
EXTRA_ALL  += $(HOOK_TEST_LIBS)
UNIT_TESTS += $(BUILD)/t/test_hooks $(BUILD)/t/test_hooks_per_request

$(BUILD)/t/hooklib/libtesthooks.so: t/unit/test_hooks_lib.c src/include/srt_hooks.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $< -lm
$(BUILD)/t/hooklib/libbadabi.so: t/unit/test_hooks_badabi.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $<
$(BUILD)/t/hooklib/libnoabi.so: t/unit/test_hooks_noabi.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $<

CFLAGS_t_unit_test_hooks := -DHOOK_TEST_LIBDIR='"$(HOOK_TEST_LIBDIR)"'
$(BUILD)/t/test_hooks: | $(HOOK_TEST_LIBS)

# Example hook libraries (documented in src/hooks/README.md): build/lib/libsrt_hook_*.so
HOOK_EXAMPLES := $(BUILD)/lib/libsrt_hook_actlog.so $(BUILD)/lib/libsrt_hook_steer.so \
                 $(BUILD)/lib/libsrt_hook_capture.so
EXTRA_ALL += $(HOOK_EXAMPLES)
$(BUILD)/lib/libsrt_hook_%.so: src/hooks/examples/%.c src/include/srt_hooks.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $< -lm

UNIT_TESTS += $(BUILD)/t/test_hooks_examples
CFLAGS_t_unit_test_hooks_examples := -DHOOK_EXAMPLE_LIBDIR='"$(abspath $(BUILD))/lib"'
$(BUILD)/t/test_hooks_examples: | $(HOOK_EXAMPLES)

# Hooks on the real model (needs .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf).
UNIT_TESTS += $(BUILD)/t/test_hooks_model
CFLAGS_t_unit_test_hooks_model := -DHOOK_EXAMPLE_LIBDIR='"$(abspath $(BUILD))/lib"'
$(BUILD)/t/test_hooks_model: | $(HOOK_EXAMPLES)

# Benchmark: decode tokens/s with no hooks, a no-op hook on every module, or a spec file;
# and the same program with the model's forward code compiled with -DSRT_NO_HOOKS (those
# objects are linked ahead of libsrt.a, so they replace its members).
HOOK_BENCH_NOHOOK_SRCS := $(shell grep -l srt_module_forward src/model/*.c 2>/dev/null)
HOOK_BENCH_NOHOOK_OBJS := $(HOOK_BENCH_NOHOOK_SRCS:%.c=$(BUILD)/obj-nohooks/%.o)
EXTRA_ALL += $(BUILD)/bin/srt-bench-hooks $(BUILD)/bin/srt-bench-hooks-nohooks

$(BUILD)/bin/srt-bench-hooks: $(BUILD)/obj/src/hooks/bench_hooks.o $(LIBSRT)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIBSRT) $(LDLIBS)
$(BUILD)/obj-nohooks/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSRT_NO_HOOKS -c $< -o $@
$(BUILD)/obj-nohooks/src/hooks/bench_hooks.o: src/hooks/bench_hooks.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSRT_NO_HOOKS -c $< -o $@
$(BUILD)/bin/srt-bench-hooks-nohooks: $(BUILD)/obj-nohooks/src/hooks/bench_hooks.o $(HOOK_BENCH_NOHOOK_OBJS) $(LIBSRT)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LIBSRT) $(LDLIBS)
-include $(HOOK_BENCH_NOHOOK_OBJS:.o=.d) $(BUILD)/obj-nohooks/src/hooks/bench_hooks.d
