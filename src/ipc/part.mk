# Shared-memory channel between nginx workers and the scheduler process (no nginx headers).
ENGINE_SRCS += src/ipc/channel.c
UNIT_TESTS  += $(BUILD)/t/test_ipc

# srt-bench-chan: one request's round trip through the channel, no HTTP, no model (the
# hand-off floor scripts/bench_http.py compares the module against)
TOOLS += $(BUILD)/bin/srt-bench-chan
$(BUILD)/bin/srt-bench-chan: $(BUILD)/obj/src/ipc/bench_chan.o $(LIBSRT)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIBSRT) $(LDLIBS)
