/* The request contract: what one generation request asks for and how it ended, as every
 * component sees it. The nginx worker fills it (validated), the channel carries it in the
 * slot as this very type, the scheduler and the sampler read it. Nothing else defines a
 * sampling field, a limit on one, or a finish reason.
 *
 * Plain data, no pointers: a srt_request may live in shared memory. A process that reads it
 * from there (the scheduler) does not trust it: srt_sampling_params_clamp() forces every
 * count that indexes an array into range before use; srt_sampling_params_check() is the
 * full validation with a message naming the field.
 *
 * Adding per-request data (structured output, per-request hook selection, returned
 * activations): give it a member of srt_request below, with its own SRT_REQ_*_MAX bound
 * defined here, and copy it like `sampling`:
 *   - fixed size (a hook selection: n ids, at most SRT_REQ_MAX_x): an array member;
 *   - variable size (a grammar's text): a { kind, length } member here, the bytes in an
 *     area of the channel slot sized by that bound (src/ipc: the slot layout lists its
 *     areas, srt_chan_size() sizes them), exposed to the scheduler through srt_chan_req;
 *   - data flowing back (activations): an area in the slot's output side, like the
 *     top-logprob ring, bounded the same way.
 * Bounds are checked where the request is parsed (a 400 naming the field) and clamped where
 * it is read back (the scheduler), both against the constants here. */
#ifndef SRT_REQUEST_H
#define SRT_REQUEST_H

#include <stdint.h>

#include "srt/common.h"

#define SRT_REQ_MAX_STOP_IDS      64    /* stop_token_ids (after mapping stop strings) */
#define SRT_REQ_MAX_LOGIT_BIAS    300   /* logit_bias entries */
#define SRT_REQ_MAX_TOP_LOGPROBS  20    /* top_logprobs alternatives per token */
#define SRT_REQ_MAX_GRAMMAR       16384 /* bytes of a structured-output spec (schema, regex, GBNF) */
#define SRT_REQ_MAX_HOOKS         4     /* "hooks": per-request hook selections */
#define SRT_REQ_HOOK_NAME_MAX     64    /* a selected spec's name, NUL included */
#define SRT_REQ_HOOK_CONFIG_MAX   8192  /* all selections' "config" JSON texts together */
#define SRT_REQ_MAX_ACTIVATIONS   8     /* "return_activations" entries */
#define SRT_REQ_ACT_MODULE_MAX    64    /* a module name, NUL included */

/* How a request ended. The sampler sets NONE/STOP/LENGTH; the scheduler adds ABORT and
 * ERROR; the channel carries the value to the worker unchanged. */
typedef enum srt_finish_reason {
    SRT_FINISH_NONE   = 0,   /* still running */
    SRT_FINISH_STOP   = 1,   /* EOS or a stop token id (the token is part of the output) */
    SRT_FINISH_LENGTH = 2,   /* max_tokens reached or the context is full */
    SRT_FINISH_ABORT  = 3,   /* the client went away, or shutdown */
    SRT_FINISH_ERROR  = 4,   /* the model or the scheduler failed (a message travels along) */
} srt_finish_reason;

/* Sampling parameters of one request. Order of processing: see srt/sampling.h. */
typedef struct srt_sampling_params {
    float    temperature;          /* 0: greedy. default 1 */
    float    top_p;                /* (0, 1], default 1 */
    int32_t  top_k;                /* <= 0: off */
    float    min_p;                /* [0, 1], default 0 */
    float    repetition_penalty;   /* > 0, default 1: prompt and output tokens (HF/vLLM rule) */
    float    frequency_penalty;    /* [-2, 2]: output tokens, times their count */
    float    presence_penalty;     /* [-2, 2]: output tokens, once */
    int32_t  max_tokens;           /* new tokens; the scheduler caps it at the context */
    int32_t  min_tokens;           /* EOS and stop ids are masked until this many were generated */
    int32_t  ignore_eos;           /* EOS does not finish (stop_token_ids still do) */
    int32_t  has_seed;             /* 0: the scheduler picks a seed per request */
    uint64_t seed;                 /* same seed, same params, same logits -> same tokens */
    int32_t  logprobs;             /* report the chosen token's logprob */
    int32_t  top_logprobs;         /* and this many alternatives (<= SRT_REQ_MAX_TOP_LOGPROBS) */
    int32_t  n_stop_ids;
    int32_t  stop_ids[SRT_REQ_MAX_STOP_IDS];
    int32_t  n_logit_bias;
    int32_t  logit_bias_ids[SRT_REQ_MAX_LOGIT_BIAS];
    float    logit_bias[SRT_REQ_MAX_LOGIT_BIAS];
} srt_sampling_params;

/* Structured output: the output must match this (src/include/srt/grammar.h compiles it).
 * The text is validated where the request is parsed (a 400 naming the position) and compiled
 * again by the scheduler, which caches compiled grammars by (kind, text). It is a fixed-size
 * member for now (16 KB per slot) rather than a slot area: see the rules above. */
typedef enum srt_grammar_kind {
    SRT_GRAMMAR_NONE        = 0,
    SRT_GRAMMAR_JSON_SCHEMA = 1,   /* a JSON Schema (response_format json_schema, SGLang json_schema) */
    SRT_GRAMMAR_JSON_OBJECT = 2,   /* any JSON object (response_format json_object); no text */
    SRT_GRAMMAR_REGEX       = 3,   /* SGLang regex */
    SRT_GRAMMAR_GBNF        = 4,   /* SGLang ebnf, llama.cpp GBNF */
} srt_grammar_kind;

typedef struct srt_grammar_spec {
    int32_t kind;                        /* srt_grammar_kind */
    int32_t len;                         /* bytes of text, < SRT_REQ_MAX_GRAMMAR */
    char    text[SRT_REQ_MAX_GRAMMAR];   /* NUL-terminated */
} srt_grammar_spec;

/* "hooks": [{"name": N, "config": {...}}]: forward-hook specs marked "per_request" that run
 * for this request's tokens only, each with its own config (JSON text, NUL-terminated, at
 * config_text + config_off[i]). cache_ns names the radix-cache namespace the request may
 * share prefixes in: 0 for requests without hooks or cache_salt (the shared one), else a
 * hash of cache_salt and the selection (names and configs), so no prefix computed under
 * another selection, config or tenant salt is ever served. */
typedef struct srt_request_hooks {
    int32_t  n;
    char     name[SRT_REQ_MAX_HOOKS][SRT_REQ_HOOK_NAME_MAX];
    uint32_t config_off[SRT_REQ_MAX_HOOKS];
    uint32_t config_len[SRT_REQ_MAX_HOOKS];   /* without the NUL */
    char     config_text[SRT_REQ_HOOK_CONFIG_MAX];
} srt_request_hooks;

/* "return_activations": [{"module": M, "reduce": R, "dtype": D}]: the output of module M
 * (model.embed_tokens, model.layers.N or model.norm: rows of [tokens, hidden], replicated on
 * every tensor-parallel rank) for this request's positions, captured by the scheduler after
 * the module's forward hooks (src/hooks/activations.c) and returned per choice through the
 * slot's activation area (ipc/channel.h, srt_max_activation_bytes). Positions: the prompt's,
 * then each generated token's but the last (which is never fed back); "all" keeps every row
 * in position order, "mean" their mean (summed in double), "last" the row of the highest
 * position (the one that produced the last token). A request with "all" or "mean" never
 * reuses a cached prefix (its prompt is computed again, so every row is seen). */
typedef enum srt_act_reduce {
    SRT_ACT_LAST = 0,
    SRT_ACT_MEAN = 1,
    SRT_ACT_ALL  = 2,
} srt_act_reduce;

typedef enum srt_act_dtype {
    SRT_ACT_F32 = 0,
    SRT_ACT_F16 = 1,
} srt_act_dtype;

typedef struct srt_act_spec {
    char    module[SRT_REQ_ACT_MODULE_MAX];   /* NUL-terminated */
    int32_t reduce;                           /* srt_act_reduce */
    int32_t dtype;                            /* srt_act_dtype */
} srt_act_spec;

typedef struct srt_request_activations {
    int32_t      n;                           /* 0: none asked */
    srt_act_spec spec[SRT_REQ_MAX_ACTIVATIONS];
} srt_request_activations;

/* What the scheduler writes into the slot's activation area: for each spec, in request
 * order, one record header then `bytes` of little-endian data (rows x cols, row-major),
 * padded to 8 bytes. rows is 1 for "last" and "mean" (a [cols] tensor). */
typedef struct srt_act_record {
    int32_t  spec;       /* index into srt_request_activations.spec */
    int32_t  dtype;      /* srt_act_dtype */
    int64_t  rows;
    int64_t  cols;
    uint64_t bytes;      /* rows * cols * element size */
} srt_act_record;

/* Which capturable module a name is: 0 for model.embed_tokens, 1 + N for model.layers.N
 * (N < n_layers, decimal without leading zeros), n_layers + 1 for model.norm; -1 otherwise. */
SRT_API int32_t srt_act_module_index(const char *name, int32_t n_layers);

/* Bytes of one choice's area for these specs: records and data, rows_all rows for "all". */
SRT_API uint64_t srt_request_activations_bytes(const srt_request_activations *a, int64_t rows_all,
                                               int64_t hidden);

/* One request as the channel slot holds it (the prompt travels beside it, in the slot's
 * token area). New per-request data goes here: see the rules at the top of this file. */
typedef struct srt_request {
    srt_sampling_params sampling;
    srt_grammar_spec    grammar;
    srt_request_hooks   hooks;
    uint64_t            cache_ns;
    srt_request_activations acts;   /* "return_activations" */
} srt_request;

/* Defaults: temperature 1, top_p 1, top_k off, min_p 0, penalties neutral, max_tokens 16. */
SRT_API void srt_sampling_params_default(srt_sampling_params *p);
/* Range checks; the message names the field. */
SRT_API int  srt_sampling_params_check(const srt_sampling_params *p, int32_t vocab_size, srt_err *err);
/* Force the counts that index arrays (stop ids, logit bias, top logprobs) into
 * [0, SRT_REQ_MAX_*]: for a copy read from memory another process may have scribbled. */
SRT_API void srt_sampling_params_clamp(srt_sampling_params *p);
/* The same for a hook selection: n in range, names and configs NUL-terminated inside their
 * arrays (a config that does not fit is dropped: length 0 reads as "{}"). */
SRT_API void srt_request_hooks_clamp(srt_request_hooks *h);
/* The same for activations: n in range, names NUL-terminated, unknown reduce/dtype -> n = 0
 * is not done here: the scheduler refuses those with a message (srt_act_capture_begin). */
SRT_API void srt_request_activations_clamp(srt_request_activations *a);

#endif
