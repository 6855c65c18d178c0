ENGINE_SRCS += src/comm/cpu_comm.c src/comm/nccl_comm.c
UNIT_TESTS  += $(BUILD)/t/test_comm
