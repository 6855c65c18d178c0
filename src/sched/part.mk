ENGINE_SRCS += src/sched/sched.c src/sched/serve.c src/sched/metrics.c
UNIT_TESTS  += $(BUILD)/t/test_sched
UNIT_TESTS  += $(BUILD)/t/test_sched_model
UNIT_TESTS  += $(BUILD)/t/test_sched_serve
