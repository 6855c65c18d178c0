# Shared-memory channel between nginx workers and the scheduler process (no nginx headers).
ENGINE_SRCS += src/ipc/channel.c src/ipc/hook_admin.c
UNIT_TESTS  += $(BUILD)/t/test_ipc $(BUILD)/t/test_hook_admin
