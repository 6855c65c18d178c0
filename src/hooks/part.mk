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
