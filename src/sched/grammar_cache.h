/* The scheduler's compiled grammars, by (kind, text): private to src/sched. */
#ifndef SRT_SCHED_GRAMMAR_CACHE_H
#define SRT_SCHED_GRAMMAR_CACHE_H

#include "srt/grammar.h"
#include "srt/request.h"

typedef struct grammar_cache grammar_cache;

/* Nothing is loaded until the first grammar: requests without one cost nothing. */
grammar_cache *grammar_cache_new(const char *model_path, int32_t vocab_size, const int32_t *eos_ids,
                                 int32_t n_eos);
void grammar_cache_free(grammar_cache *gc);
/* A new reference to the grammar of spec (read once: it may be shared memory), compiled on a
 * miss; NULL with err set when it does not compile or the tokenizer cannot be loaded. */
srt_grammar *grammar_cache_get(grammar_cache *gc, const srt_grammar_spec *spec, srt_err *err);
/* The tokenizer the grammars' vocabulary came from (jump-forward tokenizes forced text with it):
 * NULL before the first grammar loaded it. Owned by the cache. */
const struct srt_tokenizer *grammar_cache_tokenizer(const grammar_cache *gc);

#endif
