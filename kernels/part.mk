# CUDA kernels (kernels/*.cu) and the toolchain settings. src/backend/cuda/part.mk links them
# with the CUDA backend into the plugin build/lib/libsrt_cuda.so (cudart, cuBLASLt). libsrt
# itself never links CUDA: src/backend/cuda/cuda_loader.c dlopens the plugin (see
# src/include/srt/backend_cuda.h).
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
# cuBLASLt from the toolkit by default; scripts/gpu-check points these at a pip wheel's copy
# (nvidia-cublas) when the toolkit on a machine has none.
CUBLAS_INC    ?= $(CUDA_HOME)/include
CUBLAS_LIBDIR ?= $(CUDA_HOME)/lib64
CUBLAS_LIB    ?= -lcublasLt
CUDA_LDLIBS := -L$(CUBLAS_LIBDIR) -Wl,-rpath,$(CUBLAS_LIBDIR) $(CUBLAS_LIB) \
               -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++ -lm -lpthread -ldl

$(BUILD)/obj/kernels/%.o: kernels/%.cu kernels/common.cuh kernels/srt_kernels.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

.PHONY: kernels
kernels: $(KERNEL_OBJS)
