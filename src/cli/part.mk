# Programs: offline tools and the benchmark programs (each a src/cli/srt-*.c with a main,
# linked against libsrt.a by the pattern rule in the Makefile).
TOOLS += $(BUILD)/bin/srt-generate $(BUILD)/bin/srt-tokenize $(BUILD)/bin/srt-bench-matmul
TOOLS += $(BUILD)/bin/srt-bench-grammar

# srt-bench-chan: one request's round trip through the channel, no HTTP, no model (the
# hand-off floor scripts/bench_http.py compares the module against)
TOOLS += $(BUILD)/bin/srt-bench-chan
# srt-bench-sched: offline scheduler throughput over a real model
TOOLS += $(BUILD)/bin/srt-bench-sched
# srt-bench-tp: tensor-parallel decode throughput and all-reduce cost on the CPU communicator
TOOLS += $(BUILD)/bin/srt-bench-tp

# srt-bench-hooks: decode tokens/s with no hooks, a no-op hook on every module, or a spec
# file; and the same program with the model's forward code compiled with -DSRT_NO_HOOKS
# (those objects are linked ahead of libsrt.a, so they replace its members).
HOOK_BENCH_NOHOOK_SRCS := $(shell grep -l srt_module_forward src/model/*.c 2>/dev/null)
HOOK_BENCH_NOHOOK_OBJS := $(HOOK_BENCH_NOHOOK_SRCS:%.c=$(BUILD)/obj-nohooks/%.o)
EXTRA_ALL += $(BUILD)/bin/srt-bench-hooks $(BUILD)/bin/srt-bench-hooks-nohooks

$(BUILD)/obj-nohooks/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -DSRT_NO_HOOKS -c $< -o $@
$(BUILD)/bin/srt-bench-hooks-nohooks: $(BUILD)/obj-nohooks/src/cli/srt-bench-hooks.o $(HOOK_BENCH_NOHOOK_OBJS) $(BUILD)/libsrt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(BUILD)/libsrt.a $(LDLIBS)
-include $(HOOK_BENCH_NOHOOK_OBJS:.o=.d) $(BUILD)/obj-nohooks/src/cli/srt-bench-hooks.d
