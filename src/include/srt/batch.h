/* One forward step of a continuous-batching scheduler (SGLang style: token-level KV slots).
 *
 * The batch is a list of sequences, each contributing a contiguous run of new tokens
 * (a prefill chunk, possibly after a cached prefix, or one decode token). Token i of the
 * batch is written into KV slot out_slots[i]; sequence s then attends over the slots
 * seq_slots[s][0 .. seq_len[s]-1], which already include the new tokens' slots.
 * All arrays are owned by the caller and only read during srt_runner_forward(). */
#ifndef SRT_BATCH_H
#define SRT_BATCH_H

#include <stdint.h>

typedef struct srt_forward_batch {
    int32_t               n_tokens;
    const int32_t        *token_ids;     /* [n_tokens] */
    const int32_t        *positions;     /* [n_tokens] position of each token in its sequence */
    const int32_t        *out_slots;     /* [n_tokens] KV slot each token's K/V is written to */
    int32_t               n_seqs;
    const int32_t        *seq_start;     /* [n_seqs+1] offsets into the token arrays */
    const int32_t        *seq_len;       /* [n_seqs] context length after this step */
    const int32_t *const *seq_slots;     /* [n_seqs] -> [seq_len[s]] slots of positions 0.. */
    const uint64_t       *request_ids;   /* [n_tokens], may be NULL (hooks then see 0) */
    int32_t               forward_mode;  /* srt_forward_mode (srt_hooks.h) */
    /* Rows that get logits. NULL: the last token of each sequence, in sequence order
     * (n_seqs rows). Otherwise n_logit_rows token indices (e.g. for prompt logprobs). */
    int32_t               n_logit_rows;
    const int32_t        *logit_rows;
} srt_forward_batch;

#endif
