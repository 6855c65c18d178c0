# CPU backend: the ops table, attention, compute kernels (portable, AVX2, AVX-512), the
# precise (f64-accumulating) path, the thread pool.
ENGINE_SRCS += src/backend/cpu/cpu_backend.c \
               src/backend/cpu/attention.c \
               src/backend/cpu/cpu_dot.c \
               src/backend/cpu/precise.c \
               src/backend/cpu/dequant.c \
               src/backend/cpu/threadpool.c \
               src/backend/cpu/elementwise.c \
               src/backend/cpu/matmul.c \
               src/backend/cpu/kernels_portable.c \
               src/backend/cpu/kernels_avx2.c \
               src/backend/cpu/kernels_avx512.c \
               src/backend/cpu/exact.c \
               src/backend/cpu/exact_q41.c \
               src/backend/cpu/exact_avx512.c
