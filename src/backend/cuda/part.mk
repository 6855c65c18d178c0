# CUDA backend, libsrt side: the plugin loader (no CUDA headers, always built). The plugin
# itself (cuda_backend.c + kernels/) is built by kernels/part.mk when nvcc is found.
ENGINE_SRCS += src/backend/cuda/cuda_loader.c
