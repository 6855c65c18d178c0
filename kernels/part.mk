# CUDA kernels. Built when nvcc is found (override: make NVCC= for a CPU-only build).
# sm_80 and sm_90a machine code plus compute_90 PTX for newer GPUs.
NVCC       ?= $(shell command -v nvcc 2>/dev/null)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCC_FLAGS ?= -O3 -std=c++17 -Xcompiler -fPIC -Ikernels \
              -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90a,code=sm_90a \
              -gencode arch=compute_90,code=compute_90

KERNEL_SRCS := $(wildcard kernels/*.cu)
KERNEL_OBJS := $(KERNEL_SRCS:%.cu=$(BUILD)/obj/%.o)
LIBSRT_CUDA := $(BUILD)/libsrt_cuda.a

ifneq ($(NVCC),)
EXTRA_ALL += $(LIBSRT_CUDA)
endif

$(BUILD)/obj/kernels/%.o: kernels/%.cu kernels/common.cuh kernels/srt_kernels.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(LIBSRT_CUDA): $(KERNEL_OBJS)
	rm -f $@ && ar rcs $@ $^

.PHONY: kernels
kernels: $(LIBSRT_CUDA)
