/* Token masks equal xgrammar's, token for token, on SmolLM2's 49152-token vocabulary: replays the
 * random walks of t/fixtures/grammar/smollm2.txt (scripts/make_grammar_fixtures.py) and compares
 * every step's whole mask (count and a digest of the allowed ids) for >= 50 JSON schemas,
 * >= 20 regexes and GBNF grammars. Needs the SmolLM2 GGUF (SRT_MODEL_DIR), not xgrammar. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <yajl/yajl_tree.h>

#include "srt/grammar.h"
#include "srt/tokenizer.h"
#include "tap.h"


/* sum of splitmix64(id) over the allowed ids, as the fixture script computes it */
static uint64_t
digest(const uint32_t *mask, size_t n_ids, size_t *count)
{
    uint64_t h = 0, z;
    size_t   i;

    *count = 0;
    for (i = 0; i < n_ids; i++) {
        if (mask[i >> 5] >> (i & 31) & 1) {
            (*count)++;
            z = (uint64_t) i + 0x9E3779B97F4A7C15ull;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            h += z ^ (z >> 31);
        }
    }
    return h;
}


static char *
json_text(const char *line)
{
    char      err[128];
    yajl_val  v = yajl_tree_parse(line, err, sizeof(err));
    char     *s;

    if (v == NULL || !YAJL_IS_STRING(v)) {
        yajl_tree_free(v);
        return NULL;
    }
    s = strdup(v->u.string);
    yajl_tree_free(v);
    return s;
}


typedef struct {
    char   kind[16];
    char  *text;
    int    n_cases_seen;
} fixture_case;


int
main(void)
{
    const char         *dir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    const char         *fx = getenv("SRT_GRAMMAR_FIXTURES") ? getenv("SRT_GRAMMAR_FIXTURES")
                                                            : "t/fixtures/grammar/smollm2.txt";
    char                path[1024], line[1 << 16];
    srt_tokenizer      *tok = NULL;
    srt_grammar_vocab  *v = NULL;
    srt_grammar        *g = NULL;
    srt_grammar_matcher *m = NULL;
    srt_err             err;
    FILE               *f;
    uint32_t           *mask;
    size_t              n_ids, count, want_count;
    unsigned long long  want_hash;
    int                 case_bad = 0, steps = 0, cases = 0, kinds[3] = { 0, 0, 0 }, tok_id, term;
    int                 step_in_walk = 0, walk = 0;
    char                kind[16] = "", *text = NULL;
    double              t0;
    srt_grammar_json_opts opts = { 4, 0 };

    snprintf(path, sizeof(path), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    f = fopen(path, "rb");
    if (f == NULL) {
        const char *req = getenv("SRT_REQUIRE_MODELS");
        if (req && strcmp(req, "1") == 0) {
            tap_ok(0, "model %s is present (SRT_REQUIRE_MODELS=1)", path);
        } else {
            tap_diag("%s not present: xgrammar comparison not run", path);
        }
        return tap_done();
    }
    fclose(f);
    if (srt_tokenizer_from_gguf(path, &tok, &err) != SRT_OK
        || srt_grammar_vocab_from_tokenizer(tok, 0, NULL, 0, &v, &err) != SRT_OK)
    {
        tap_ok(0, "vocab: %s", err.msg);
        return tap_done();
    }
    n_ids = srt_grammar_vocab_size(v);
    mask = malloc(srt_grammar_mask_words(v) * sizeof(uint32_t));
    f = fopen(fx, "r");
    if (!tap_ok(f != NULL, "fixtures %s", fx)) {
        return tap_done();
    }
    t0 = (double) clock() / CLOCKS_PER_SEC;

#define FINISH_CASE()                                                                     \
    if (text) {                                                                           \
        for (char *q = text; *q; q++) {                                                   \
            if (*q == '\n') *q = '/';                                                      \
        }                                                                                 \
        tap_ok(g != NULL && case_bad == 0, "%s %.70s", kind, text);                       \
        srt_grammar_matcher_free(m);                                                      \
        m = NULL;                                                                         \
        srt_grammar_free(g);                                                              \
        g = NULL;                                                                         \
        free(text);                                                                       \
        text = NULL;                                                                      \
    }

    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') {
            continue;
        }
        if (strncmp(line, "case ", 5) == 0) {
            char *sp;
            FINISH_CASE();
            sp = strchr(line + 5, ' ');
            if (sp == NULL) {
                continue;
            }
            snprintf(kind, sizeof(kind), "%.*s", (int) (sp - line - 5), line + 5);
            text = json_text(sp + 1);
            case_bad = 0;
            walk = 0;
            cases++;
            if (text == NULL) {
                case_bad = 1;
                continue;
            }
            if (strcmp(kind, "schema") == 0) {
                kinds[0]++;
                srt_grammar_compile_json_schema(v, text, strlen(text), &opts, &g, &err);
            } else if (strcmp(kind, "regex") == 0) {
                kinds[1]++;
                srt_grammar_compile_regex(v, text, strlen(text), &g, &err);
            } else {
                kinds[2]++;
                srt_grammar_compile_gbnf(v, text, strlen(text), &g, &err);
            }
            if (g == NULL) {
                tap_diag("compile: %s", err.msg);
            } else if (cases % 4 == 0) {
                /* a quarter of the cases with every state's cache computed up front, on several
                   threads (srt_grammar_precompute): their masks must be the lazy ones */
                srt_grammar_precompute(g);
            }
            continue;
        }
        if (g == NULL) {
            continue;
        }
        if (strcmp(line, "walk") == 0) {
            srt_grammar_matcher_free(m);
            m = srt_grammar_matcher_new(g);
            step_in_walk = 0;
            walk++;
            continue;
        }
        if (m == NULL || case_bad) {
            continue;
        }
        if (sscanf(line, "step %d %zu %llx", &tok_id, &want_count, &want_hash) == 3) {
            uint64_t h;
            srt_grammar_matcher_fill_mask(m, mask);
            h = digest(mask, n_ids, &count);
            steps++;
            if (count != want_count || h != want_hash) {
                tap_diag("%s walk %d step %d: %zu allowed, xgrammar %zu", kind, walk,
                         step_in_walk, count, want_count);
                case_bad = 1;
                continue;
            }
            if (!srt_grammar_matcher_accept_token(m, tok_id)) {
                tap_diag("%s walk %d step %d: token %d refused", kind, walk, step_in_walk, tok_id);
                case_bad = 1;
            }
            step_in_walk++;
        } else if (sscanf(line, "end %zu %llx %d", &want_count, &want_hash, &term) == 3) {
            if (term != srt_grammar_matcher_is_terminated(m)) {
                tap_diag("%s walk %d: terminated %d, xgrammar %d", kind, walk,
                         srt_grammar_matcher_is_terminated(m), term);
                case_bad = 1;
            } else if (!term) {
                uint64_t h;
                srt_grammar_matcher_fill_mask(m, mask);
                h = digest(mask, n_ids, &count);
                steps++;
                if (count != want_count || h != want_hash) {
                    tap_diag("%s walk %d end: %zu allowed, xgrammar %zu", kind, walk, count,
                             want_count);
                    case_bad = 1;
                }
            }
        }
    }
    FINISH_CASE();
    fclose(f);
    tap_ok(kinds[0] >= 50 && kinds[1] + kinds[2] >= 20, "coverage: %d schemas, %d regexes, "
           "%d grammars, %d masks compared", kinds[0], kinds[1], kinds[2], steps);
    tap_diag("%d cases in %.2f s CPU", cases, (double) clock() / CLOCKS_PER_SEC - t0);
    free(mask);
    srt_grammar_vocab_free(v);
    srt_tokenizer_free(tok);
    return tap_done();
}
