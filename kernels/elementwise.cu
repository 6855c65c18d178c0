/* Embedding lookup from the bf16 table. CPU twin: the CPU backend's embed
 * (srt_cpu_dequant_row of the table row). The f32 ops of the backend table are in ops.cu. */
#include "common.cuh"

__global__ void embedding_kernel(const uint16_t *table, int64_t vocab, int dim, const int32_t *ids,
                                 float *out)
{
    int t = blockIdx.x;
    int32_t id = ids[t];
    float *o = out + (int64_t)t * dim;
    if (id < 0 || id >= vocab) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            o[i] = 0.0f;
        return;
    }
    const uint16_t *row = table + (int64_t)id * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        o[i] = bf2f(row[i]);
}

extern "C" int srt_cuda_embedding(const srt_bf16_bits *table, int64_t vocab, int dim,
                                  const int32_t *ids, int n_tok, float *out, void *stream)
{
    if (n_tok <= 0)
        return 0;
    embedding_kernel<<<n_tok, 256, 0, SRT_STREAM(stream)>>>(table, vocab, dim, ids, out);
    return launch_status();
}
