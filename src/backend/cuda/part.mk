# CUDA backend. libsrt side: the plugin loader (no CUDA headers, always built). The plugin
# build/lib/libsrt_cuda.so is this folder's cuda_backend.c plus the kernels (kernels/part.mk,
# which finds nvcc and sets CUDA_HOME, CUDA_PLUGIN, KERNEL_OBJS, CUDA_LDLIBS); built when
# nvcc is found.
ENGINE_SRCS += src/backend/cuda/cuda_loader.c

CUDA_PLUGIN_OBJS := $(KERNEL_OBJS) $(BUILD)/obj-cuda/src/backend/cuda/cuda_backend.o

ifneq ($(NVCC),)
EXTRA_ALL += $(CUDA_PLUGIN)
# where the loader looks for the plugin: the build tree, or where `make install` puts it
CUDA_PLUGIN_PATH ?= $(abspath $(CUDA_PLUGIN))
CFLAGS_src_backend_cuda_cuda_loader := -DSRT_HAVE_CUDA -DSRT_CUDA_PLUGIN_PATH='"$(CUDA_PLUGIN_PATH)"'
endif

# The backend is C, compiled by $(CC) against the CUDA headers, hidden except the plugin entry.
$(BUILD)/obj-cuda/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -I$(CUDA_HOME)/include -I$(CUBLAS_INC) -Ikernels -c $< -o $@

# -z defs: the plugin must not lean on symbols of the process that loads it
$(CUDA_PLUGIN): $(CUDA_PLUGIN_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-z,defs -o $@ $^ $(CUDA_LDLIBS)

.PHONY: cuda-plugin
cuda-plugin: $(CUDA_PLUGIN)

-include $(BUILD)/obj-cuda/src/backend/cuda/cuda_backend.d
