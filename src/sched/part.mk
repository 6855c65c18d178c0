ENGINE_SRCS += src/sched/sched.c
UNIT_TESTS  += $(BUILD)/t/test_sched
