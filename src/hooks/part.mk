# Forward hooks: spec parsing, matching, factory loading, registry, dispatch, srt_admin.
ENGINE_SRCS += src/hooks/dispatch.c src/hooks/tensor_util.c src/hooks/match.c \
               src/hooks/spec.c src/hooks/resolve.c src/hooks/host.c src/hooks/registry.c \
               src/hooks/admin.c src/hooks/per_request.c src/hooks/activations.c src/hooks/control_vector.c src/hooks/elf_symbols.c

# Example hook libraries (documented in src/hooks/README.md): build/lib/libsrt_hook_*.so
HOOK_EXAMPLES := $(BUILD)/lib/libsrt_hook_actlog.so $(BUILD)/lib/libsrt_hook_steer.so \
                 $(BUILD)/lib/libsrt_hook_capture.so
EXTRA_ALL += $(HOOK_EXAMPLES)
$(BUILD)/lib/libsrt_hook_%.so: src/hooks/examples/%.c src/include/srt_hooks.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $< -lm

# The device-hook example (hook ABI 1.1 forward_device, captured into CUDA graphs): built when
# nvcc is found (kernels/part.mk), like the CUDA plugin. Runs on a GPU only (t/gpu/test_device_hooks).
ifneq ($(NVCC),)
HOOK_CUDA_EXAMPLE := $(BUILD)/lib/libsrt_hook_steer_cuda.so
EXTRA_ALL += $(HOOK_CUDA_EXAMPLE)
$(HOOK_CUDA_EXAMPLE): src/hooks/examples/steer_cuda.cu src/include/srt_hooks.h
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -Isrc/include $(CUDA_ARCHS) \
	    -shared -cudart shared -o $@ $< -Xlinker -rpath,$(CUDA_HOME)/lib64
endif
