/* Logits processing and sampling, one state per request.
 *
 * Order of processing (as vLLM/SGLang): repetition, frequency and presence penalties ->
 * logit_bias -> min_tokens (EOS and stop ids masked) -> temperature -> top_k -> top_p ->
 * min_p -> draw. temperature == 0 is greedy (argmax after penalties, bias and masks).
 * Logprobs are those of the model's raw distribution (log_softmax of the logits before any
 * processing), as vLLM reports by default.
 *
 *   srt_sampler_ws *ws = srt_sampler_ws_create(vocab);           // shared scratch, one per thread
 *   srt_sampler st;  srt_sampler_init(&st, &params, vocab, eos_ids, n_eos, prompt, n_prompt, &err);
 *   loop: srt_sampler_sample(&st, ws, logits_row, &res);          // logits_row is modified
 *         ... res.token, res.finish ...
 *   srt_sampler_free(&st);
 */
#ifndef SRT_SAMPLING_H
#define SRT_SAMPLING_H

#include <stdint.h>

#include "srt/common.h"
#include "srt/request.h"   /* srt_sampling_params, srt_finish_reason, limits */

typedef struct srt_sample_result {
    int32_t token;
    int32_t finish;                               /* srt_finish_reason */
    float   logprob;                              /* when params.logprobs */
    int32_t n_top;
    int32_t top_ids[SRT_REQ_MAX_TOP_LOGPROBS];
    float   top_logprobs[SRT_REQ_MAX_TOP_LOGPROBS];
} srt_sample_result;

/* The greedy choice: the first index of the largest of v[0..n) (n >= 1). */
SRT_API int32_t srt_argmax(const float *v, int32_t n);

/* Scratch shared by the requests sampled on one thread (vocab-sized; no allocation per token). */
typedef struct srt_sampler_ws srt_sampler_ws;
SRT_API srt_sampler_ws *srt_sampler_ws_create(int32_t vocab_size);
SRT_API void            srt_sampler_ws_free(srt_sampler_ws *ws);

/* Per-request state. history holds the prompt then every sampled token. */
typedef struct srt_sampler {
    srt_sampling_params p;
    int32_t   vocab_size;
    int32_t   n_eos;
    int32_t   eos_ids[8];
    uint64_t  rng[4];
    int32_t  *history;
    int32_t   n_prompt, n_history, cap_history;
    int32_t   n_generated;
    int32_t   finished;          /* srt_finish_reason once done */
} srt_sampler;

SRT_API int  srt_sampler_init(srt_sampler *s, const srt_sampling_params *p, int32_t vocab_size,
                              const int32_t *eos_ids, int32_t n_eos, const int32_t *prompt, int32_t n_prompt,
                              srt_err *err);
SRT_API void srt_sampler_free(srt_sampler *s);
/* Processes logits[vocab] in place, draws a token, appends it to the history and says
 * whether the request is finished. Fails only if the request had already finished. */
SRT_API int  srt_sampler_sample(srt_sampler *s, srt_sampler_ws *ws, float *logits, srt_sample_result *res);
/* Tokens the sampler did not draw: the last n_drop output tokens of the history are replaced by
 * ids[0..n) (a grammar's forced continuation, retokenized together with the token drawn before
 * it), so penalties, min_tokens and max_tokens see the output as it is. SRT_ERROR, nothing
 * changed, when n_drop exceeds the output, an id is outside the vocabulary or max_tokens has no
 * room for them. */
SRT_API int  srt_sampler_replace_tail(srt_sampler *s, int32_t n_drop, const int32_t *ids, int32_t n);

#endif
