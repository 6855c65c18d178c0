/* The grammar engine: GBNF / regex / JSON Schema compilation and errors, matching, and token masks
 * checked against a brute-force oracle (every token tried on its own) over random walks, on a
 * synthetic vocabulary with multi-byte and partial-UTF-8 tokens. Masks against xgrammar on a real
 * tokenizer are in test_grammar_xgr.c. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"
#include "srt/grammar.h"
#include "tap.h"

static srt_grammar_vocab *V;
static size_t N_IDS;
static const char *TOKS[] = {
    "a", "b", "c", "ab", "abc", "ba", "0", "1", "2", "9", "12", "123", "-", ".", "e", "+",
    "{", "}", "[", "]", ",", ":", "\"", "\\", " ", "  ", "\n", "\t", "{\"", "\":", "\",", "\"}",
    "\": \"", "true", "false", "null", "tr", "ue", "nu", "ll", "x", "y", "z", "xyz", "hello",
    " hello", "name", "\"name\"", "age", "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82", "\xac", "\xe2\x82\xac",
    "caf\xc3", "\xf0\x9f\x98\x80", "\xf0\x9f", "\x98\x80", "A", "Z", "_", "/", "u", "n", "t", "r",
    "f", "l", "s", "\\n", "\\\"", "\\u00", "e9", "E", "}}", "]]", "},", "],", "[{", "\"a\"", "3",
    "4", "5", "6", "7", "8", "00", "-1", "1.5", "@", "com", "example", "date", "T", "Z",
};
#define N_TOKS (sizeof(TOKS) / sizeof(TOKS[0]))
#define EOS_ID ((int32_t) N_TOKS)


static void
make_vocab(void)
{
    const char *bytes[N_TOKS + 2];
    size_t      lens[N_TOKS + 2];
    uint8_t     special[N_TOKS + 2];
    int32_t     stop = EOS_ID;
    srt_err     err;
    size_t      i;

    N_IDS = N_TOKS + 2;         /* EOS, and one padding id no tokenizer has */
    for (i = 0; i < N_TOKS; i++) {
        bytes[i] = TOKS[i];
        lens[i] = strlen(TOKS[i]);
        special[i] = 0;
    }
    bytes[N_TOKS] = "</s>"; lens[N_TOKS] = 4; special[N_TOKS] = 1;
    bytes[N_TOKS + 1] = NULL; lens[N_TOKS + 1] = 0; special[N_TOKS + 1] = 0;
    if (srt_grammar_vocab_new(N_IDS, bytes, lens, special, &stop, 1, &V, &err) != SRT_OK) {
        printf("Bail out! vocab: %s\n", err.msg);
        exit(1);
    }
}


static int
matches(srt_grammar *g, const char *s)
{
    srt_grammar_matcher *m = srt_grammar_matcher_new(g);
    int ok = m && (s[0] == '\0' || srt_grammar_matcher_accept_bytes(m, s, strlen(s)))
             && srt_grammar_matcher_can_end(m);
    srt_grammar_matcher_free(m);
    return ok;
}


static uint64_t rng = 88172645463325252ull;
static uint32_t
rnd(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t) rng;
}


/* Random walks; at each step the mask must equal trying every token; returns mismatches. */
static int
walk_oracle(srt_grammar *g, int walks, int steps, int *ended)
{
    size_t    words = srt_grammar_mask_words(V), id;
    uint32_t *mask = malloc(words * 4);
    int       bad = 0, w, s, n_ok;
    int32_t   ok[256];

    for (w = 0; w < walks; w++) {
        srt_grammar_matcher *m = srt_grammar_matcher_new(g);
        for (s = 0; s < steps; s++) {
            srt_grammar_matcher_fill_mask(m, mask);
            n_ok = 0;
            for (id = 0; id < N_IDS; id++) {
                int want = srt_grammar_matcher_accept_token(m, (int32_t) id);
                int got = (int) (mask[id >> 5] >> (id & 31) & 1);
                if (want) {
                    srt_grammar_matcher_rollback(m, 1);
                    ok[n_ok++] = (int32_t) id;
                }
                if (want != got) {
                    if (bad++ < 5) {
                        tap_diag("walk %d step %d token %zu ('%s'): oracle %d mask %d", w, s, id,
                                 id < N_TOKS ? TOKS[id] : "?", want, got);
                    }
                }
            }
            if (n_ok == 0) {
                break;
            }
            /* prefer not to stop early so walks go deep */
            id = (size_t) ok[rnd() % n_ok];
            if ((int32_t) id == EOS_ID && n_ok > 1 && rnd() % 4) {
                id = (size_t) ok[rnd() % n_ok];
            }
            srt_grammar_matcher_accept_token(m, (int32_t) id);
            if (srt_grammar_matcher_is_terminated(m)) {
                (*ended)++;
                break;
            }
        }
        srt_grammar_matcher_free(m);
    }
    free(mask);
    return bad;
}


static void
check_gbnf_error(const char *gbnf, const char *want)
{
    srt_grammar *g = NULL;
    srt_err      err;
    int          rc = srt_grammar_compile_gbnf(V, gbnf, strlen(gbnf), &g, &err);

    tap_ok(rc == SRT_ERROR && strstr(err.msg, want) != NULL, "gbnf error '%s' -> %s",
           want, rc == SRT_ERROR ? err.msg : "(compiled)");
    srt_grammar_free(g);
}


static void
check_regex_error(const char *re, const char *want)
{
    srt_grammar *g = NULL;
    srt_err      err;
    int          rc = srt_grammar_compile_regex(V, re, strlen(re), &g, &err);

    tap_ok(rc == SRT_ERROR && strstr(err.msg, want) != NULL, "regex /%s/ error -> %s",
           re, rc == SRT_ERROR ? err.msg : "(compiled)");
    srt_grammar_free(g);
}


static srt_grammar *
gbnf(const char *text)
{
    srt_grammar *g = NULL;
    srt_err      err;

    if (srt_grammar_compile_gbnf(V, text, strlen(text), &g, &err) != SRT_OK) {
        tap_diag("compile failed: %s", err.msg);
        return NULL;
    }
    return g;
}


static srt_grammar *
regex(const char *re)
{
    srt_grammar *g = NULL;
    srt_err      err;

    if (srt_grammar_compile_regex(V, re, strlen(re), &g, &err) != SRT_OK) {
        tap_diag("regex compile failed: %s", err.msg);
        return NULL;
    }
    return g;
}


static void
test_gbnf_matching(void)
{
    srt_grammar *g;

    g = gbnf("root ::= \"ab\" [0-9]+ (\"x\" | \"yz\")?");
    tap_ok(g && matches(g, "ab1") && matches(g, "ab12x") && matches(g, "ab0yz"), "gbnf: accepts");
    tap_ok(g && !matches(g, "ab") && !matches(g, "abx") && !matches(g, "ab1y"), "gbnf: rejects");
    srt_grammar_free(g);

    /* rules over several lines, comments, recursion (right and middle), repetition counts */
    g = gbnf("# nested lists\nroot ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\n"
             "item ::= list |\n   [a-c]{1,3}  # letters\n");
    tap_ok(g && matches(g, "[]") && matches(g, "[a,[b,[]],abc]") && !matches(g, "[abca]")
           && !matches(g, "[a,]"), "gbnf: recursion and counted repetition");
    srt_grammar_free(g);

    /* code points: literals and classes are UTF-8; negated classes exclude by code point */
    g = gbnf("root ::= \"caf\\u00e9\" [^a-z\\u00e9]");
    tap_ok(g && matches(g, "caf\xc3\xa9" "\xe2\x82\xac") && !matches(g, "caf\xc3\xa9" "a")
           && !matches(g, "caf\xc3\xa9" "\xc3\xa9") && !matches(g, "caf\xc3\xa9" "\xc3"),
           "gbnf: UTF-8 literals and negated classes");
    srt_grammar_free(g);

    /* right recursion over long input stays flat */
    g = gbnf("root ::= \"a\" root | \"b\"");
    {
        char big[20002];
        memset(big, 'a', 20000);
        big[20000] = 'b';
        big[20001] = '\0';
        tap_ok(g && matches(g, big), "gbnf: 20000-deep right recursion");
    }
    srt_grammar_free(g);

    check_gbnf_error("root ::= foo", "rule 'foo' is used at byte 9 but never defined");
    check_gbnf_error("main ::= \"a\"", "no 'root' rule");
    check_gbnf_error("root ::= root \"a\" | \"b\"", "'root' is left-recursive");
    check_gbnf_error("root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"", "'x' is left-recursive");
    check_gbnf_error("root ::= \"a\\q\"", "unknown escape '\\q' at byte 12");
    check_gbnf_error("root ::= (\"a\" ", "expected ')'");
    check_gbnf_error("root ::= \"a\"{3,1}", "max below min");
    check_gbnf_error("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    check_gbnf_error("root ::= [z-a]", "out of order");
    check_gbnf_error("root ::= \"abc", "unterminated string");
}


static void
test_regex(void)
{
    srt_grammar *g;

    g = regex("^\\d{3}-\\d{2,}(x|y)?$");
    tap_ok(g && matches(g, "123-45") && matches(g, "123-456y") && !matches(g, "12-45")
           && !matches(g, "123-4"), "regex: digits and counts");
    srt_grammar_free(g);

    g = regex("[^\\s\\d][\\w.]*@(?:example|test)\\.com");
    tap_ok(g && matches(g, "a.b_c@example.com") && !matches(g, "1a@test.com")
           && !matches(g, "ab@examplecom") && matches(g, "\xc3\xa9@test.com"),
           "regex: classes, shorthands, groups");
    srt_grammar_free(g);

    g = regex("a.c|[\\u00e9-\\u00ff]+?|x{2}|{");
    tap_ok(g && matches(g, "abc") && matches(g, "a\xe2\x82\xac" "c") && matches(g, "a\nc")
           && matches(g, "\xc3\xa9\xc3\xbf") && matches(g, "xx") && matches(g, "{"),
           "regex: dot (newline too, as xgrammar), unicode ranges, lazy, literal brace");
    srt_grammar_free(g);

    check_regex_error("(a", "missing ')' at offset 2");
    check_regex_error("a)", "unbalanced ')'");
    check_regex_error("(a)\\1", "backreferences are not supported at offset 4");
    check_regex_error("(?=a)", "lookaround");
    check_regex_error("a\\bb", "word boundaries");
    check_regex_error("*a", "nothing to repeat");
    check_regex_error("a^b", "'^' is only supported at the start");
    check_regex_error("[a-", "unterminated character class");
}


static void
test_masks(void)
{
    static const char *grammars[] = {
        "root ::= \"ab\" [0-9]+ (\"x\" | \"yz\")?",
        "root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= list | [a-c]{1,3}",
        "root ::= obj\nobj ::= \"{\" ws (pair (ws \",\" ws pair)*)? ws \"}\"\n"
        "pair ::= str ws \":\" ws val\nval ::= str | num | obj | \"true\" | \"null\"\n"
        "str ::= \"\\\"\" ([^\"\\\\] | \"\\\\\" [\"\\\\n])* \"\\\"\"\n"
        "num ::= \"-\"? [0-9]+ (\".\" [0-9]+)?\nws ::= [ \\n]{0,2}",
        "root ::= [^\"]{0,6} \"\\\"\"",
        "root ::= (\"a\" | \"ab\" | \"abc\") (\"c\" | \"bc\")* \"!\"?",
        "root ::= x y\nx ::= \"a\"*\ny ::= x \"b\" | \"c\"",
        "root ::= \"caf\\u00e9\" [^a-z]* \"\\u20ac\"",
        "root ::= s\ns ::= \"(\" s \")\" s | \"\"",
    };
    static const char *regexes[] = {
        "\\d{1,3}(\\.\\d+)?",
        "[a-z]+@[a-z]+\\.com",
        "(true|false|null)",
        "\"[^\"]*\"",
        "[\\u00e0-\\u00ff\\u20ac]{2,4}",
        ".{0,5}e",
    };
    size_t i;
    int    ended, bad;

    for (i = 0; i < sizeof(grammars) / sizeof(grammars[0]); i++) {
        srt_grammar *g = gbnf(grammars[i]);
        ended = 0;
        bad = g ? walk_oracle(g, 20, 40, &ended) : -1;
        tap_ok(bad == 0, "masks = oracle, grammar %zu (%d walks ended)", i, ended);
        srt_grammar_free(g);
    }
    for (i = 0; i < sizeof(regexes) / sizeof(regexes[0]); i++) {
        srt_grammar *g = regex(regexes[i]);
        ended = 0;
        bad = g ? walk_oracle(g, 20, 40, &ended) : -1;
        tap_ok(bad == 0, "masks = oracle, regex /%s/ (%d walks ended)", regexes[i], ended);
        srt_grammar_free(g);
    }
}


/* States whose token caches are equal share one (equiv.c): the copies of a bounded repetition
 * further than the longest token from its end are one class, and masks over shared caches still
 * equal the oracle's, with every cache precomputed or filled on first use. */
static void
test_shared_caches(void)
{
    static const char *grammars[] = {
        "root ::= [a-c]{0,40} \"!\"",
        "root ::= (str \",\"){3} str\nstr ::= \"\\\"\" [a-z ]{0,20} \"\\\"\"",
        "root ::= l\nl ::= \"[\" ([a-c]{0,12} | l) (\",\" l)? \"]\"",
    };
    size_t   i;
    int32_t  s, n_byte, n_class, *rep;
    int      ended, bad, pre;

    for (i = 0; i < sizeof(grammars) / sizeof(grammars[0]); i++) {
        for (pre = 0; pre < 2; pre++) {
            srt_grammar *g = gbnf(grammars[i]);
            if (g == NULL) {
                tap_ok(0, "shared caches: grammar %zu compiles", i);
                continue;
            }
            if (pre) {
                srt_grammar_precompute(g);
            }
            ended = 0;
            bad = walk_oracle(g, 20, 40, &ended);
            tap_ok(bad == 0, "shared caches: masks = oracle, grammar %zu, %s (%d walks ended)", i,
                   pre ? "precomputed" : "lazy", ended);
            srt_grammar_free(g);
        }
    }

    /* 40 copies of [a-c]: those at least max_len bytes from the "!" all behave alike */
    srt_grammar *g = gbnf(grammars[0]);
    rep = NULL;
    n_byte = n_class = 0;
    if (g && grammar_equiv(g, V->max_len, &rep) == 0) {
        for (s = 0; s < g->n_st; s++) {
            if (g->st[s].kind == ST_BYTE) {
                n_byte++;
                n_class += rep[s] == s;
            }
        }
    }
    tap_ok(n_byte > 40 && n_class > 0 && n_class <= (int32_t) V->max_len + 2,
           "shared caches: [a-c]{0,40}\"!\": %d BYTE states, %d classes (longest token %u bytes)",
           n_byte, n_class, V->max_len);
    free(rep);
    srt_grammar_free(g);
}


/* What may follow a rule (grammar_follow): s below is followed by ',' or ']' only, so in the
 * cache of s's states over an unknown caller, "ba" and "abc" (which leave s and go on with 'a'
 * or 'c') are rejected outright instead of being checked against the stack at every step. */
static void
test_follow(void)
{
    srt_grammar *g = gbnf("root ::= \"[\" s (\",\" s)* \"]\"\ns ::= \"a\" s | \"b\"");
    int32_t      r_s = -1, s, i, x, n_unc = 0, n_states = 0, ok_set = 0;
    int          ended = 0;

    if (g == NULL) {
        tap_ok(0, "follow: grammar compiles");
        return;
    }
    /* the rule a call of which is followed by ',' or ']' */
    for (s = 0; s < g->n_st; s++) {
        if (g->st[s].kind == ST_CALL) {
            r_s = g->st[s].a;
        }
    }
    srt_grammar_precompute(g);
    if (r_s >= 0 && g->follow) {
        const uint64_t *f = &g->follow[(size_t) r_s * 4];
        ok_set = f[0] == (1ull << ',') && f[1] == (1ull << (']' - 64)) && !f[2] && !f[3];
        for (i = g->clo_off[g->rule_start[r_s]]; i < g->clo_off[g->rule_start[r_s] + 1]; i++) {
            x = g->clo[i];
            if (x != CLO_FINAL && g->st[x].kind == ST_BYTE) {
                const state_cache *sc = grammar_state_cache(g, x, 0);
                n_states++;
                n_unc += sc ? sc->n_unc : 1000;
            }
        }
    }
    tap_ok(ok_set, "follow: the rule called for list items is followed by ',' or ']' only");
    tap_ok(n_states == 2 && n_unc == 0, "follow: its %d start states have %d uncertain tokens",
           n_states, n_unc);
    tap_ok(walk_oracle(g, 20, 40, &ended) == 0, "follow: masks = oracle (%d walks ended)", ended);
    srt_grammar_free(g);
}


static void
test_matcher_api(void)
{
    srt_grammar         *g = gbnf("root ::= \"{\\\"name\\\": \" [0-9]+ \"}\"");
    srt_grammar_matcher *m = g ? srt_grammar_matcher_new(g) : NULL;
    char                 buf[64];
    size_t               n;
    uint32_t             mask[8];

    if (m == NULL) {
        tap_ok(0, "matcher");
        return;
    }
    n = srt_grammar_matcher_forced_bytes(m, buf, sizeof(buf));
    tap_ok(n == 9 && memcmp(buf, "{\"name\": ", 9) == 0, "forced bytes: the literal prefix (%zu)",
           n);
    tap_ok(srt_grammar_matcher_accept_bytes(m, "{\"name\": 1", 10), "accept bytes");
    tap_ok(!srt_grammar_matcher_can_end(m), "cannot end inside");
    tap_ok(!srt_grammar_matcher_accept_token(m, EOS_ID), "EOS refused before the end");
    tap_ok(srt_grammar_matcher_accept_token(m, 17) /* } */ && srt_grammar_matcher_can_end(m),
           "accept '}'");
    srt_grammar_matcher_fill_mask(m, mask);
    tap_ok(mask[EOS_ID >> 5] >> (EOS_ID & 31) & 1, "EOS in the mask at the end");
    tap_ok(!(mask[(N_TOKS + 1) >> 5] >> ((N_TOKS + 1) & 31) & 1), "padding id never allowed");
    tap_ok(srt_grammar_matcher_accept_token(m, EOS_ID) && srt_grammar_matcher_is_terminated(m),
           "EOS terminates");
    srt_grammar_matcher_rollback(m, 2);
    tap_ok(!srt_grammar_matcher_can_end(m) && srt_grammar_matcher_accept_token(m, 7),
           "rollback 2 undoes EOS and '}'");
    srt_grammar_matcher_free(m);
    srt_grammar_free(g);
}


/* Mutated grammars, regexes and schemas: every compile either succeeds or fails with a message;
 * nothing crashes (run under valgrind / ASan for leaks). Compiling without a vocab is what the
 * worker does to validate a request. */
static void
test_fuzz(void)
{
    static const char *seeds[] = {
        "root ::= \"a\" [b-d]* (x | \"y\"){1,3}\nx ::= [^a] x | \"z\"",
        "root ::= s\ns ::= \"(\" s \")\" s | \"\"",
        "[a-z]+@(x|y)\\.com\\d{2,}",
        "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\", \"minimum\": 3},"
        " \"b\": {\"type\": \"array\", \"items\": {\"$ref\": \"#\"}}}, \"required\": [\"a\"]}",
        "{\"anyOf\": [{\"type\": \"string\", \"pattern\": \"^a+$\"}, {\"enum\": [1, \"x\", null]}]}",
    };
    static const char alphabet[] = "()[]{}|*+?^$\\\"'.,:-#\n az09_{}\"";
    char     buf[512];
    int      i, k, ok = 0, failed = 0, bad = 0;
    srt_err  err;

    for (i = 0; i < 6000; i++) {
        const char *seed = seeds[i % 5];
        size_t      n = strlen(seed), m;
        srt_grammar *g = NULL;
        int          rc;

        memcpy(buf, seed, n + 1);
        for (k = 0; k < 1 + (int) (rnd() % 4); k++) {
            m = strlen(buf);
            switch (rnd() % 3) {
            case 0:             /* replace */
                if (m) buf[rnd() % m] = alphabet[rnd() % (sizeof(alphabet) - 1)];
                break;
            case 1:             /* delete */
                if (m) { size_t at = rnd() % m; memmove(buf + at, buf + at + 1, m - at); }
                break;
            default:            /* insert */
                if (m + 2 < sizeof(buf)) {
                    size_t at = rnd() % (m + 1);
                    memmove(buf + at + 1, buf + at, m - at + 1);
                    buf[at] = alphabet[rnd() % (sizeof(alphabet) - 1)];
                }
            }
        }
        err.msg[0] = '\0';
        if (i % 5 < 2) {
            rc = srt_grammar_compile_gbnf(i & 1 ? V : NULL, buf, strlen(buf), &g, &err);
        } else if (i % 5 == 2) {
            rc = srt_grammar_compile_regex(i & 1 ? V : NULL, buf, strlen(buf), &g, &err);
        } else {
            rc = srt_grammar_compile_json_schema(i & 1 ? V : NULL, buf, strlen(buf), NULL, &g, &err);
        }
        if (rc == SRT_OK) {
            ok++;
            if (g == NULL) bad++;
            if (g && (i & 1)) {         /* walk it a little */
                srt_grammar_matcher *mt = srt_grammar_matcher_new(g);
                uint32_t mask[8];
                for (k = 0; mt && k < 8; k++) {
                    srt_grammar_matcher_fill_mask(mt, mask);
                    int32_t pick = -1;
                    for (int32_t id = 0; id < (int32_t) N_IDS && pick < 0; id++)
                        if (mask[id >> 5] >> (id & 31) & 1) pick = id;
                    if (pick < 0 || !srt_grammar_matcher_accept_token(mt, pick)) break;
                }
                srt_grammar_matcher_free(mt);
            }
        } else {
            failed++;
            if (g != NULL || err.msg[0] == '\0') bad++;
        }
        srt_grammar_free(g);
    }
    tap_ok(bad == 0, "fuzz: 6000 mutated grammars, regexes and schemas: %d compile, %d refused with "
           "a message, no crash", ok, failed);
}


int
main(void)
{
    make_vocab();
    test_gbnf_matching();
    test_regex();
    test_masks();
    test_shared_caches();
    test_follow();
    test_matcher_api();
    test_fuzz();
    srt_grammar_vocab_free(V);
    return tap_done();
}
