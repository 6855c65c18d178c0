#ifndef SRT_CPU_ATTENTION_H
#define SRT_CPU_ATTENTION_H

#include "backend/cpu/cpu_kernels.h"
#include "srt/backend.h"

/* Causal attention of every batch token over its sequence's KV slots (see srt_attn_args).
 * head_dim <= 1024. Multithreaded over (token, head). */
void srt_cpu_attention(srt_threadpool *tp, const srt_attn_args *a);

#endif
