# Model: config, loaders (safetensors, GGUF), architectures, module tree, forward, KV pool.
ENGINE_SRCS += src/model/tensor_store.c src/model/gguf.c src/model/safetensors.c src/model/config.c \
               src/model/model.c src/model/kv_pool.c src/model/runner.c src/model/runner_graphs.c \
               src/model/resident.c
