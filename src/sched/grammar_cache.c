/*
 * Compiled grammars, cached by their text.
 *
 * Where grammars are compiled, by measurement (scripts/bench_grammar.py, BENCHMARKS.md): turning
 * a schema into an automaton takes tens of microseconds, but the per-state token caches that make
 * masks cheap take milliseconds to fill and are worth keeping across requests. So the worker only
 * validates (a 400 before anything is queued) and the scheduler compiles against the vocabulary
 * and keeps the result here, so the second request with the same schema finds its token caches
 * warm. The vocabulary (each token's bytes) needs the tokenizer, loaded on the first grammar.
 * At most CAP grammars are kept, least recently used out; a grammar still used by a running
 * request lives on through that request's reference.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/grammar_cache.h"
#include "srt/tokenizer.h"

#define CAP 64


typedef struct {
    int32_t       kind;
    int32_t       len;
    char         *text;
    srt_grammar  *g;
    uint64_t      used;
} entry;


struct grammar_cache {
    char               *model_path;
    int32_t             vocab_size;
    int32_t             eos[8];
    int32_t             n_eos;
    srt_tokenizer      *tok;
    srt_grammar_vocab  *vocab;
    int                 load_failed;
    char                load_err[1100];
    entry               e[CAP];
    uint64_t            tick;
    char                buf[SRT_REQ_MAX_GRAMMAR];
};


grammar_cache *
grammar_cache_new(const char *model_path, int32_t vocab_size, const int32_t *eos_ids, int32_t n_eos)
{
    grammar_cache *gc = calloc(1, sizeof(*gc));

    if (gc == NULL) {
        return NULL;
    }
    gc->model_path = strdup(model_path);
    gc->vocab_size = vocab_size;
    gc->n_eos = n_eos < 0 ? 0 : n_eos > 8 ? 8 : n_eos;
    memcpy(gc->eos, eos_ids, sizeof(int32_t) * (size_t) gc->n_eos);
    if (gc->model_path == NULL) {
        free(gc);
        return NULL;
    }
    return gc;
}


void
grammar_cache_free(grammar_cache *gc)
{
    int i;

    if (gc == NULL) {
        return;
    }
    for (i = 0; i < CAP; i++) {
        free(gc->e[i].text);
        srt_grammar_free(gc->e[i].g);
    }
    srt_grammar_vocab_free(gc->vocab);
    srt_tokenizer_free(gc->tok);
    free(gc->model_path);
    free(gc);
}


static int
load_vocab(grammar_cache *gc, srt_err *err)
{
    int  rc;

    if (gc->vocab) {
        return SRT_OK;
    }
    if (gc->load_failed) {
        return srt_err_set(err, "%s", gc->load_err);
    }
    /* the front's tokenizer: the same files, so the same ids */
    rc = srt_tokenizer_load_model(gc->model_path, NULL, 0, &gc->tok, err);
    if (rc == SRT_OK) {
        rc = srt_grammar_vocab_from_tokenizer(gc->tok, (size_t) gc->vocab_size, gc->eos,
                                              (size_t) gc->n_eos, &gc->vocab, err);
    }
    if (rc != SRT_OK) {
        gc->load_failed = 1;
        snprintf(gc->load_err, sizeof(gc->load_err), "structured output: %s", err->msg);
        return srt_err_set(err, "%s", gc->load_err);
    }
    srt_log(SRT_LOG_INFO, "structured output: vocabulary of %zu tokens loaded",
            srt_grammar_vocab_size(gc->vocab));
    return SRT_OK;
}


srt_grammar *
grammar_cache_get(grammar_cache *gc, const srt_grammar_spec *spec, srt_err *err)
{
    int32_t       kind = spec->kind, len = spec->len;
    int           i, victim = 0, rc;
    srt_grammar  *g = NULL;
    entry        *e;

    if (len < 0 || len >= SRT_REQ_MAX_GRAMMAR) {
        srt_err_set(err, "structured output: bad length %d", len);
        return NULL;
    }
    memcpy(gc->buf, spec->text, (size_t) len);     /* one read of shared memory */
    gc->buf[len] = '\0';
    gc->tick++;
    for (i = 0; i < CAP; i++) {
        e = &gc->e[i];
        if (e->g && e->kind == kind && e->len == len && memcmp(e->text, gc->buf, (size_t) len) == 0) {
            e->used = gc->tick;
            return srt_grammar_ref(e->g);
        }
        if (e->g == NULL || (gc->e[victim].g && e->used < gc->e[victim].used)) {
            victim = i;
        }
    }
    if (load_vocab(gc, err) != SRT_OK) {
        return NULL;
    }
    switch (kind) {
    case SRT_GRAMMAR_JSON_SCHEMA:
        rc = srt_grammar_compile_json_schema(gc->vocab, gc->buf, (size_t) len, NULL, &g, err);
        break;
    case SRT_GRAMMAR_JSON_OBJECT:
        rc = srt_grammar_compile_json_object(gc->vocab, NULL, &g, err);
        break;
    case SRT_GRAMMAR_REGEX:
        rc = srt_grammar_compile_regex(gc->vocab, gc->buf, (size_t) len, &g, err);
        break;
    case SRT_GRAMMAR_GBNF:
        rc = srt_grammar_compile_gbnf(gc->vocab, gc->buf, (size_t) len, &g, err);
        break;
    default:
        srt_err_set(err, "structured output: unknown kind %d", kind);
        return NULL;
    }
    if (rc != SRT_OK) {
        return NULL;
    }
    e = &gc->e[victim];
    free(e->text);
    srt_grammar_free(e->g);
    e->text = malloc((size_t) len + 1);
    if (e->text == NULL) {
        e->g = NULL;
        return g;                       /* used once, not kept */
    }
    memcpy(e->text, gc->buf, (size_t) len + 1);
    e->kind = kind;
    e->len = len;
    e->g = srt_grammar_ref(g);
    e->used = gc->tick;
    return g;
}


const struct srt_tokenizer *
grammar_cache_tokenizer(const grammar_cache *gc)
{
    return gc->vocab ? gc->tok : NULL;
}
