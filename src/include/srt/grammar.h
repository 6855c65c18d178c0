/* Grammar-constrained decoding: GBNF/EBNF grammars, regular expressions, JSON Schema and "any JSON
 * object", compiled into a byte-level pushdown automaton that yields, per decoding step, the set of
 * tokens of the whole vocabulary that keep the output inside the grammar.
 *
 * Objects and ownership:
 *   srt_grammar_vocab    the tokenizer's view the engine needs (each token's bytes, which ids are
 *                        special, which end generation) and a byte trie over it. Immutable after
 *                        creation; one per tokenizer, shared by every grammar compiled against it.
 *   srt_grammar          a compiled grammar. Immutable except for its per-state token cache, which
 *                        fills on first use under a mutex: one grammar may serve matchers on
 *                        several threads. Reference counted (srt_grammar_ref / srt_grammar_free)
 *                        so that a cache of compiled grammars can hand the same one to many
 *                        requests. It keeps a pointer to its vocab, which must outlive it.
 *   srt_grammar_matcher  one sequence's position in a grammar: accept tokens, fill masks, roll
 *                        back. Not thread-safe; holds a reference on its grammar.
 *
 * Masks are bitsets over token ids: bit (id & 31) of word id >> 5, 1 = allowed. EOS (the vocab's stop
 * ids) is allowed only where the grammar can end. Special tokens are never allowed otherwise.
 *
 * Errors (an invalid or unsupported schema, regex or grammar) come back as SRT_ERROR with a message
 * naming the keyword, rule or byte offset, meant to be shown to the client as a 400. */
#ifndef SRT_GRAMMAR_H
#define SRT_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "srt/common.h"

typedef struct srt_grammar_vocab   srt_grammar_vocab;
typedef struct srt_grammar         srt_grammar;
typedef struct srt_grammar_matcher srt_grammar_matcher;
struct srt_tokenizer;

/* n_ids token ids (may exceed the tokenizer's: padded model vocabularies); bytes[i]/lens[i] are what
 * token i decodes to (NULL or special: never allowed by a grammar); stop ids end generation. */
SRT_API int srt_grammar_vocab_new(size_t n_ids, const char *const *bytes, const size_t *lens,
                                  const uint8_t *special, const int32_t *stop_ids, size_t n_stop,
                                  srt_grammar_vocab **out, srt_err *err);
/* The same from a loaded tokenizer: its special tokens are excluded, its EOS (and extra_stop ids)
 * end generation. n_ids 0 means the tokenizer's vocab size. */
SRT_API int srt_grammar_vocab_from_tokenizer(const struct srt_tokenizer *tok, size_t n_ids,
                                             const int32_t *extra_stop, size_t n_extra,
                                             srt_grammar_vocab **out, srt_err *err);
SRT_API void srt_grammar_vocab_free(srt_grammar_vocab *v);
SRT_API size_t srt_grammar_vocab_size(const srt_grammar_vocab *v);
/* Bitset words a mask needs: (n_ids + 31) / 32. */
SRT_API size_t srt_grammar_mask_words(const srt_grammar_vocab *v);

/* Options of the JSON frontends. Zero-initialized = the defaults noted. */
typedef struct srt_grammar_json_opts {
    int max_ws;          /* whitespace bytes allowed between JSON tokens; 0 = default (4), -1 = none */
    int allow_additional;/* 1: properties not named by a schema are allowed where the schema does not
                            say (JSON Schema's default); 0 (default): they are not (strict mode) */
} srt_grammar_json_opts;

/* Compilers. text need not be NUL-terminated. */
SRT_API int srt_grammar_compile_gbnf(const srt_grammar_vocab *v, const char *text, size_t len,
                                     srt_grammar **out, srt_err *err);
SRT_API int srt_grammar_compile_regex(const srt_grammar_vocab *v, const char *re, size_t len,
                                      srt_grammar **out, srt_err *err);
SRT_API int srt_grammar_compile_json_schema(const srt_grammar_vocab *v, const char *schema, size_t len,
                                            const srt_grammar_json_opts *opts, srt_grammar **out,
                                            srt_err *err);
int srt_grammar_compile_json_object(const srt_grammar_vocab *v, const srt_grammar_json_opts *opts,
                                    srt_grammar **out, srt_err *err);   /* libsrt only */

/* Frontends to GBNF text (what the compilers above build on); *gbnf is malloc'ed. */
int srt_grammar_regex_to_gbnf(const char *re, size_t len, char **gbnf, srt_err *err);   /* libsrt only */
SRT_API int srt_grammar_json_schema_to_gbnf(const char *schema, size_t len,
                                            const srt_grammar_json_opts *opts, char **gbnf, srt_err *err);

srt_grammar *srt_grammar_ref(srt_grammar *g);                  /* libsrt only */
SRT_API void srt_grammar_free(srt_grammar *g);           /* drops one reference */
/* Computes every state's token cache now rather than on first use (what a grammar cache does
 * before publishing a grammar). */
SRT_API void srt_grammar_precompute(srt_grammar *g);

SRT_API srt_grammar_matcher *srt_grammar_matcher_new(srt_grammar *g);
SRT_API void srt_grammar_matcher_free(srt_grammar_matcher *m);
/* 1 and the matcher advanced, or 0 and unchanged when the token is not allowed. A stop id is
 * accepted where the grammar can end and terminates the matcher. */
SRT_API int srt_grammar_matcher_accept_token(srt_grammar_matcher *m, int32_t id);
/* The same for raw bytes (tests, forced continuations). */
SRT_API int srt_grammar_matcher_accept_bytes(srt_grammar_matcher *m, const char *bytes, size_t len);
/* srt_grammar_mask_words() of the matcher's vocab. */
size_t srt_grammar_matcher_mask_words(const srt_grammar_matcher *m);   /* libsrt only */
/* Writes srt_grammar_mask_words() words. */
SRT_API void srt_grammar_matcher_fill_mask(srt_grammar_matcher *m, uint32_t *mask);
/* Undo the last n accepted tokens (or byte runs); n beyond the history is clamped. */
SRT_API void srt_grammar_matcher_rollback(srt_grammar_matcher *m, size_t n);
SRT_API int srt_grammar_matcher_can_end(const srt_grammar_matcher *m);     /* stop allowed now */
SRT_API int srt_grammar_matcher_is_terminated(const srt_grammar_matcher *m); /* a stop id was accepted */
/* Bytes every continuation must start with (SGLang's jump-forward), up to cap; returns the count. */
SRT_API size_t srt_grammar_matcher_forced_bytes(srt_grammar_matcher *m, char *buf, size_t cap);

#endif
