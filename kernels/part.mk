# CUDA: kernels (kernels/*.cu) and the CUDA backend (src/backend/cuda/cuda_backend.c) go into
# the plugin build/lib/libsrt_cuda.so, linked with cudart and cuBLASLt. libsrt itself never links
# CUDA: src/backend/cuda/cuda_loader.c dlopens the plugin (see src/include/srt/backend_cuda.h).
# Built when nvcc is found; `make NVCC=` is a CPU-only build (no plugin, srt_device cuda then
# fails with "this build has no CUDA support").
# Machine code for sm_80 and sm_90a (Hopper), PTX for compute_90 (newer GPUs).
# This fragment is included before the top-level Makefile defines `all`; keep `all` the default.
.DEFAULT_GOAL := all

NVCC       ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90a,code=sm_90a \
              -gencode arch=compute_90,code=compute_90
NVCC_FLAGS ?= -O3 -std=c++17 -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -Ikernels $(CUDA_ARCHS)

KERNEL_SRCS := $(wildcard kernels/*.cu)
KERNEL_OBJS := $(KERNEL_SRCS:%.cu=$(BUILD)/obj/%.o)
CUDA_PLUGIN := $(BUILD)/lib/libsrt_cuda.so
CUDA_PLUGIN_OBJS := $(KERNEL_OBJS) $(BUILD)/obj-cuda/src/backend/cuda/cuda_backend.o
# cuBLASLt from the toolkit by default; scripts/gpu-check points these at a pip wheel's copy
# (nvidia-cublas) when the toolkit on a machine has none.
CUBLAS_INC    ?= $(CUDA_HOME)/include
CUBLAS_LIBDIR ?= $(CUDA_HOME)/lib64
CUBLAS_LIB    ?= -lcublasLt
CUDA_LDLIBS := -L$(CUBLAS_LIBDIR) -Wl,-rpath,$(CUBLAS_LIBDIR) $(CUBLAS_LIB) \
               -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++ -lm -lpthread -ldl

ifneq ($(NVCC),)
EXTRA_ALL += $(CUDA_PLUGIN)
# where the loader looks for the plugin: the build tree, or where `make install` puts it
CUDA_PLUGIN_PATH ?= $(abspath $(CUDA_PLUGIN))
CFLAGS_src_backend_cuda_cuda_loader := -DSRT_HAVE_CUDA -DSRT_CUDA_PLUGIN_PATH='"$(CUDA_PLUGIN_PATH)"'
endif

$(BUILD)/obj/kernels/%.o: kernels/%.cu kernels/common.cuh kernels/srt_kernels.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

# The backend is C, compiled by $(CC) against the CUDA headers, hidden except the plugin entry.
$(BUILD)/obj-cuda/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -I$(CUDA_HOME)/include -I$(CUBLAS_INC) -Ikernels -c $< -o $@

# -z defs: the plugin must not lean on symbols of the process that loads it
$(CUDA_PLUGIN): $(CUDA_PLUGIN_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-z,defs -o $@ $^ $(CUDA_LDLIBS)

.PHONY: kernels cuda-plugin
kernels cuda-plugin: $(CUDA_PLUGIN)

-include $(BUILD)/obj-cuda/src/backend/cuda/cuda_backend.d

# GPU tests and tools: plain C against libsrt.a (the plugin is dlopened), so they compile on
# every machine (`make` builds them: a compile check); they RUN only on a GPU machine, through
# scripts/gpu-check. Not in UNIT_TESTS.
GPU_TESTS := $(BUILD)/t/gpu/test_kernels $(BUILD)/t/gpu/gpu_generate
EXTRA_ALL += $(GPU_TESTS)
$(BUILD)/t/gpu/%: t/gpu/%.c $(BUILD)/libsrt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libsrt.a $(LDLIBS)

.PHONY: gpu-tests
gpu-tests: $(GPU_TESTS) $(if $(NVCC),$(CUDA_PLUGIN))
-include $(GPU_TESTS:=.d)
