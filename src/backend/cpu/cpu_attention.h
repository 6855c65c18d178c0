#ifndef SRT_CPU_ATTENTION_H
#define SRT_CPU_ATTENTION_H

#include "backend/cpu/cpu_kernels.h"
#include "srt/backend.h"

/* Causal attention of every batch token over its sequence's KV slots (see srt_attn_args).
 * head_dim <= 1024. Multithreaded over (token, GQA head group), and over key ranges when
 * there are too few of those for the threads (decode): that split needs scratch of
 * srt_cpu_attention_scratch_floats() floats, and is skipped without it. */
size_t srt_cpu_attention_scratch_floats(int n_threads, int32_t head_dim);
void   srt_cpu_attention(srt_threadpool *tp, const srt_attn_args *a, float *scratch, size_t scratch_floats);

#endif
