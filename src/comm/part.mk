ENGINE_SRCS += src/comm/cpu_comm.c src/comm/nccl_comm.c
UNIT_TESTS  += $(BUILD)/t/test_comm

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
UNIT_TESTS += $(BUILD)/t/test_nccl_comm
CFLAGS_t_unit_test_nccl_comm := -DFAKE_NCCL_DIR='"$(abspath $(BUILD))/lib"' \
                                -DNCCL_GPU_TEST='"$(abspath $(BUILD))/t/gpu/test_nccl"'
$(BUILD)/t/test_nccl_comm: | $(FAKE_NCCL_LIBS) $(BUILD)/t/gpu/test_nccl

# NCCL on a GPU at tp=1 (real libnccl.so.2, device buffers from the driver API): built
# everywhere as a compile check, run by scripts/gpu-check (stage nccl). The pattern rule for
# $(BUILD)/t/gpu/% is in kernels/part.mk.
NCCL_GPU_TEST := $(BUILD)/t/gpu/test_nccl
EXTRA_ALL     += $(NCCL_GPU_TEST)
gpu-tests: $(NCCL_GPU_TEST)
-include $(NCCL_GPU_TEST).d
