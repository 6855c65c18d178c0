# CPU compute kernels (and the dtype table they rest on).
ENGINE_SRCS += src/util/dtype.c \
               src/backend/cpu/dequant.c \
               src/backend/cpu/threadpool.c \
               src/backend/cpu/elementwise.c \
               src/backend/cpu/matmul.c \
               src/backend/cpu/kernels_portable.c \
               src/backend/cpu/kernels_avx2.c \
               src/backend/cpu/kernels_avx512.c \
               src/backend/cpu/exact.c
UNIT_TESTS  += $(BUILD)/t/test_cpu_kernels
TOOLS       += $(BUILD)/bin/srt-bench-matmul
