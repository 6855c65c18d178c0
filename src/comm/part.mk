# Communicators for tensor parallelism: CPU shared memory and NCCL (dlopened).
ENGINE_SRCS += src/comm/cpu_comm.c src/comm/nccl_comm.c
