# Model: config, loaders (safetensors, GGUF), architectures, module tree, forward; and the
# CPU backend's ops table and attention (src/backend/cpu/{cpu_backend,attention}.c).
ENGINE_SRCS += src/model/tensor_store.c src/model/gguf.c src/model/safetensors.c src/model/config.c \
               src/model/model.c src/model/kv_pool.c src/model/runner.c \
               src/backend/cpu/attention.c src/backend/cpu/cpu_backend.c src/backend/cpu/cpu_dot.c src/backend/cpu/precise.c
UNIT_TESTS  += $(BUILD)/t/test_golden
UNIT_TESTS  += $(BUILD)/t/test_loader_gguf
UNIT_TESTS  += $(BUILD)/t/test_loader_safetensors
UNIT_TESTS  += $(BUILD)/t/test_model_runner
UNIT_TESTS  += $(BUILD)/t/test_model_tp
UNIT_TESTS  += $(BUILD)/t/test_model_precise
UNIT_TESTS  += $(BUILD)/t/test_runner_devpath
UNIT_TESTS  += $(BUILD)/t/test_runner_graphs
