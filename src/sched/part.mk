ENGINE_SRCS += src/sched/sched.c src/sched/serve.c src/sched/metrics.c src/sched/tp_group.c \
               src/sched/grammar_cache.c
UNIT_TESTS  += $(BUILD)/t/test_sched
UNIT_TESTS  += $(BUILD)/t/test_sched_model
UNIT_TESTS  += $(BUILD)/t/test_sched_serve

# srt-bench-sched: offline scheduler throughput over a real model (not part of libsrt)
TOOLS += $(BUILD)/bin/srt-bench-sched
$(BUILD)/bin/srt-bench-sched: $(BUILD)/obj/src/sched/bench_sched.o $(LIBSRT)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIBSRT) $(LDLIBS)
UNIT_TESTS  += $(BUILD)/t/test_tp_group

# srt-bench-tp: tensor-parallel decode throughput and all-reduce cost on the CPU communicator
TOOLS += $(BUILD)/bin/srt-bench-tp
$(BUILD)/bin/srt-bench-tp: $(BUILD)/obj/src/sched/bench_tp.o $(LIBSRT)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIBSRT) $(LDLIBS)
