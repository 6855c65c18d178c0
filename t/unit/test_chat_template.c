/* Chat templates: every real template renders byte-identical to jinja2 (fixtures written by
 * scripts/make_template_fixtures.py), expression semantics match jinja2 snippet by snippet, malformed or
 * unsupported templates fail at compile time with the line and the construct, and the loaders work. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <yajl/yajl_tree.h>

#include "srt/chat_template.h"
#include "tap.h"

static const char *fixture_dir(void)
{
    const char *d = getenv("SRT_TEMPLATE_FIXTURES");
    return d ? d : "t/fixtures/templates";
}

static char *slurp(const char *path, size_t *len)
{
    char *buf = NULL;
    srt_err err;
    if (srt_chat_template_read_file(path, &buf, len, &err) != SRT_OK) {
        tap_diag("%s", err.msg);
        return NULL;
    }
    return buf;
}

static yajl_val get(yajl_val obj, const char *key)
{
    const char *path[] = {key, NULL};
    return yajl_tree_get(obj, path, yajl_t_any);
}

static const char *get_str(yajl_val obj, const char *key)
{
    yajl_val v = get(obj, key);
    return YAJL_IS_STRING(v) ? v->u.string : NULL;
}

/* Shows where two renderings part, with control characters escaped. */
static void show_escaped(const char *label, const char *s, size_t n, size_t from, size_t width)
{
    char buf[512];
    size_t k = 0;
    for (size_t i = from; i < n && i < from + width && k < sizeof(buf) - 8; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') { buf[k++] = '\\'; buf[k++] = 'n'; }
        else if (c == '\t') { buf[k++] = '\\'; buf[k++] = 't'; }
        else if (c < 0x20) k += (size_t)snprintf(buf + k, 8, "\\x%02x", c);
        else buf[k++] = (char)c;
    }
    buf[k] = '\0';
    tap_diag("  %s[%zu..]: \"%s\"", label, from, buf);
}

static void diff_excerpt(const char *want, size_t wn, const char *got, size_t gn)
{
    size_t i = 0;
    while (i < wn && i < gn && want[i] == got[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    tap_diag("  first difference at byte %zu (want %zu bytes, got %zu)", i, wn, gn);
    show_escaped("want", want, wn, from, 120);
    show_escaped("got ", got, gn, from, 120);
}

static int64_t fixed_now;

/* One rendering checked against jinja2's output or exception. */
static void check_case(const char *label, const srt_chat_template *t, yajl_val c)
{
    const char *ctx = get_str(c, "context_json");
    const char *want = get_str(c, "expected");
    const char *want_err = get_str(c, "error");
    const char *err_type = get_str(c, "error_type");
    char *out = NULL;
    size_t out_len = 0;
    srt_err err;
    err.msg[0] = '\0';
    int rc = srt_chat_template_render_at(t, ctx, strlen(ctx), fixed_now, &out, &out_len, &err);
    if (want) {
        size_t wn = strlen(want);
        bool same = rc == SRT_OK && out_len == wn && memcmp(out, want, wn) == 0;
        if (!ok(same, "%s renders like jinja2", label)) {
            if (rc != SRT_OK)
                tap_diag("  render failed: %s", err.msg);
            else
                diff_excerpt(want, wn, out, out_len);
        }
    } else {
        bool good = rc == SRT_ERROR && out == NULL && err.msg[0];
        /* raise_exception's message must come through unchanged */
        if (good && err_type && strcmp(err_type, "TemplateError") == 0)
            good = strcmp(err.msg, want_err) == 0;
        if (!ok(good, "%s raises like jinja2 (%s)", label, err_type ? err_type : "?"))
            tap_diag("  want error \"%s\", got rc=%d \"%s\" output \"%.80s\"", want_err, rc, err.msg,
                     out ? out : "");
    }
    free(out);
}

/* Mutated real templates: whatever compiles must render or fail cleanly; nothing may crash or hang.
 * Deterministic (fixed LCG seed), so a failure reproduces. */
static uint64_t lcg = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(lcg >> 33) % (n ? n : 1);
}

static int fuzz_compiled, fuzz_rendered, fuzz_bad;

static void fuzz_template(const char *src, const char *ctx)
{
    static const char *const pieces[] = {"{%", "%}", "{{", "}}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"",
                                         "|", ".", ",", " if ", " for x in ", "{% endif %}", "{% endfor %}", "\\",
                                         "\n", " not ", " is ", "~", "*", "{% else %}", "loop.", "[::-1]", ":"};
    size_t n = strlen(src);
    char *buf = malloc(n + 64);
    const char *env = getenv("SRT_TEMPLATE_FUZZ_ITERS");
    int iters = env ? atoi(env) : getenv("SRT_SOAK") ? 3000 : 120;
    for (int iter = 0; iter < iters; iter++) {
        memcpy(buf, src, n + 1);
        size_t len = n;
        int edits = 1 + (int)rnd(3);
        for (int e = 0; e < edits; e++) {
            size_t at = len ? rnd((uint32_t)len) : 0;
            if (rnd(2) == 0 && len > 0) {
                size_t k = 1 + rnd(8);
                if (at + k > len)
                    k = len - at;
                memmove(buf + at, buf + at + k, len - at - k + 1);
                len -= k;
            } else {
                const char *p = pieces[rnd(sizeof(pieces) / sizeof(pieces[0]))];
                size_t k = strlen(p);
                if (len + k + 1 > n + 63)
                    continue;
                memmove(buf + at + k, buf + at, len - at + 1);
                memcpy(buf + at, p, k);
                len += k;
            }
        }
        srt_chat_template *t = NULL;
        srt_err err;
        err.msg[0] = '\0';
        if (srt_chat_template_compile(buf, len, &t, &err) != SRT_OK) {
            if (t != NULL || strncmp(err.msg, "chat template line ", 19) != 0)
                fuzz_bad++;
            continue;
        }
        fuzz_compiled++;
        char *out = NULL;
        size_t out_len;
        err.msg[0] = '\0';
        int rc = srt_chat_template_render_at(t, ctx, strlen(ctx), fixed_now, &out, &out_len, &err);
        if (rc == SRT_OK)
            fuzz_rendered++;
        if ((rc == SRT_OK) != (out != NULL) || (rc != SRT_OK && !err.msg[0]))
            fuzz_bad++;
        free(out);
        srt_chat_template_free(t);
    }
    free(buf);
}

static void test_template_file(const char *path, const char *name)
{
    size_t len;
    char *json = slurp(path, &len);
    if (!ok(json != NULL, "%s: fixture readable", name))
        return;
    char ebuf[256];
    yajl_val root = yajl_tree_parse(json, ebuf, sizeof(ebuf));
    free(json);
    if (!ok(root != NULL, "%s: fixture parses", name))
        return;
    const char *src = get_str(root, "source");
    yajl_val cases = get(root, "cases");
    yajl_val now = get(root, "fixed_now");
    fixed_now = YAJL_IS_INTEGER(now) ? YAJL_GET_INTEGER(now) : 0;
    srt_chat_template *t = NULL;
    srt_err err;
    int rc = srt_chat_template_compile(src, strlen(src), &t, &err);
    if (!ok(rc == SRT_OK, "%s: compiles", name)) {
        tap_diag("  %s", err.msg);
        yajl_tree_free(root);
        return;
    }
    ok(YAJL_IS_ARRAY(cases) && cases->u.array.len >= 20, "%s: at least 20 conversations", name);
    for (size_t i = 0; YAJL_IS_ARRAY(cases) && i < cases->u.array.len; i++) {
        yajl_val c = cases->u.array.values[i];
        char label[160];
        snprintf(label, sizeof(label), "%s/%s", name, get_str(c, "name"));
        check_case(label, t, c);
    }
    srt_chat_template_free(t);
    if (YAJL_IS_ARRAY(cases) && cases->u.array.len > 3)
        fuzz_template(src, get_str(cases->u.array.values[3], "context_json"));
    yajl_tree_free(root);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_all_templates(void)
{
    DIR *d = opendir(fixture_dir());
    if (!ok(d != NULL, "fixture directory %s exists", fixture_dir()))
        return;
    char *names[256];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 256) {
        size_t l = strlen(de->d_name);
        if (l > 5 && strcmp(de->d_name + l - 5, ".json") == 0 && de->d_name[0] != '_')
            names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(char *), cmp_names);
    ok(n >= 18, "found %d template fixtures", n);
    for (int i = 0; i < n; i++) {
        char path[1024], name[96];
        snprintf(path, sizeof(path), "%s/%s", fixture_dir(), names[i]);
        snprintf(name, sizeof(name), "%.*s", (int)(strlen(names[i]) - 5 < 90 ? strlen(names[i]) - 5 : 90), names[i]);
        test_template_file(path, name);
        free(names[i]);
    }
    ok(fuzz_bad == 0 && fuzz_compiled > 100, "mutated templates: %d compiled, %d rendered, %d misbehaved",
       fuzz_compiled, fuzz_rendered, fuzz_bad);
}

static void test_semantics(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/_semantics.json", fixture_dir());
    size_t len;
    char *json = slurp(path, &len);
    if (!ok(json != NULL, "semantics fixture readable"))
        return;
    char ebuf[256];
    yajl_val root = yajl_tree_parse(json, ebuf, sizeof(ebuf));
    free(json);
    yajl_val cases = get(root, "cases");
    yajl_val now = get(root, "fixed_now");
    fixed_now = YAJL_IS_INTEGER(now) ? YAJL_GET_INTEGER(now) : 0;
    ok(YAJL_IS_ARRAY(cases) && cases->u.array.len >= 100, "100+ semantics snippets");
    for (size_t i = 0; YAJL_IS_ARRAY(cases) && i < cases->u.array.len; i++) {
        yajl_val c = cases->u.array.values[i];
        const char *src = get_str(c, "template");
        char label[160];
        snprintf(label, sizeof(label), "semantics #%zu %.60s", i, src);
        for (char *p = label; *p; p++)
            if (*p == '\n')
                *p = ' ';
        srt_chat_template *t = NULL;
        srt_err err;
        if (!ok(srt_chat_template_compile(src, strlen(src), &t, &err) == SRT_OK, "%s compiles", label)) {
            tap_diag("  %s", err.msg);
            continue;
        }
        check_case(label, t, c);
        srt_chat_template_free(t);
    }
    yajl_tree_free(root);
}

static void test_malformed(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/_malformed.json", fixture_dir());
    size_t len;
    char *json = slurp(path, &len);
    if (!ok(json != NULL, "malformed fixture readable"))
        return;
    char ebuf[256];
    yajl_val root = yajl_tree_parse(json, ebuf, sizeof(ebuf));
    free(json);
    yajl_val cases = get(root, "cases");
    for (size_t i = 0; YAJL_IS_ARRAY(cases) && i < cases->u.array.len; i++) {
        yajl_val c = cases->u.array.values[i];
        const char *src = get_str(c, "template");
        const char *construct = get_str(c, "unsupported");
        yajl_val line = get(c, "line");
        srt_chat_template *t = NULL;
        srt_err err;
        err.msg[0] = '\0';
        int rc = srt_chat_template_compile(src, strlen(src), &t, &err);
        bool good = rc == SRT_ERROR && t == NULL;
        char want_line[32] = "";
        if (YAJL_IS_INTEGER(line)) {
            snprintf(want_line, sizeof(want_line), "line %lld:", (long long)YAJL_GET_INTEGER(line));
            good = good && strstr(err.msg, want_line) != NULL;
        } else {
            good = good && strstr(err.msg, "line ") != NULL;
        }
        if (construct)
            good = good && strstr(err.msg, construct) != NULL;
        if (!ok(good, "compile error for %s template #%zu%s%s", construct ? "unsupported" : "malformed", i,
                construct ? ": " : "", construct ? construct : ""))
            tap_diag("  source \"%s\": rc=%d, message \"%s\" (want \"%s\" %s)", src, rc, err.msg, want_line,
                     construct ? construct : "");
        else
            tap_diag("  %s", err.msg);
        srt_chat_template_free(t);
    }
    yajl_tree_free(root);
}

static void test_api(void)
{
    srt_err err;
    char *src = NULL, *out = NULL;
    size_t n = 0;
    const char *cfg1 = "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\", \"lstrip\": false},"
                       " \"chat_template\": \"{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}\"}";
    ok(srt_chat_template_from_tokenizer_config(cfg1, strlen(cfg1), NULL, &src, &n, &err) == SRT_OK &&
           strcmp(src, "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}") == 0 && n == strlen(src),
       "tokenizer_config: string chat_template");
    free(src);
    ok(srt_tokenizer_config_token(cfg1, strlen(cfg1), "bos_token", &out, &err) == SRT_OK && strcmp(out, "<s>") == 0,
       "tokenizer_config: bos_token string");
    free(out);
    ok(srt_tokenizer_config_token(cfg1, strlen(cfg1), "eos_token", &out, &err) == SRT_OK && strcmp(out, "</s>") == 0,
       "tokenizer_config: eos_token AddedToken object");
    free(out);
    ok(srt_tokenizer_config_token(cfg1, strlen(cfg1), "pad_token", &out, &err) == SRT_ERROR && out == NULL,
       "tokenizer_config: absent token is an error");
    const char *cfg2 = "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
                       " {\"name\": \"default\", \"template\": \"D\"}, {\"name\": \"rag\", \"template\": \"R\"}]}";
    ok(srt_chat_template_from_tokenizer_config(cfg2, strlen(cfg2), NULL, &src, &n, &err) == SRT_OK &&
           strcmp(src, "D") == 0, "tokenizer_config: named list picks default");
    free(src);
    ok(srt_chat_template_from_tokenizer_config(cfg2, strlen(cfg2), "rag", &src, &n, &err) == SRT_OK &&
           strcmp(src, "R") == 0, "tokenizer_config: named list picks by name");
    free(src);
    ok(srt_chat_template_from_tokenizer_config(cfg2, strlen(cfg2), "nope", &src, &n, &err) == SRT_ERROR &&
           strstr(err.msg, "nope"), "tokenizer_config: unknown name is an error");
    ok(srt_chat_template_from_tokenizer_config("{}", 2, NULL, &src, &n, &err) == SRT_ERROR &&
           strstr(err.msg, "no chat_template"), "tokenizer_config: missing template is an error");
    ok(srt_chat_template_from_tokenizer_config("{bad", 4, NULL, &src, &n, &err) == SRT_ERROR,
       "tokenizer_config: bad JSON is an error");
    ok(srt_chat_template_read_file("/nonexistent/x.jinja", &src, &n, &err) == SRT_ERROR && strstr(err.msg, "x.jinja"),
       "read_file: missing file names the path");

    srt_chat_template *t = NULL;
    const char *tpl = "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}";
    ok(srt_chat_template_compile(tpl, strlen(tpl), &t, &err) == SRT_OK, "compile a small template");
    const char *ctx = "{\"bos_token\": \"<s>\", \"messages\": [{\"role\": \"user\", \"content\": \"hi \\u00e9\"}]}";
    ok(srt_chat_template_render(t, ctx, strlen(ctx), &out, &n, &err) == SRT_OK &&
           strcmp(out, "<s>[user:hi \xc3\xa9]") == 0 && n == strlen(out), "render with a JSON context");
    srt_chat_template_free_output(out);
    const char *bad[] = {"", "[1, 2]", "{\"messages\": [", "{\"a\": tru}", "\"str\"", "{\"a\": \"\xff\"}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        out = (char *)1;
        ok(srt_chat_template_render(t, bad[i], strlen(bad[i]), &out, &n, &err) == SRT_ERROR && out == NULL &&
               strstr(err.msg, "context"), "bad context #%zu is refused: %s", i, err.msg);
    }
    /* deep nesting in the context is refused, not a stack overflow */
    char deep[4000];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof(deep), "{\"a\": ");
    for (int i = 0; i < 1000; i++)
        deep[k++] = '[';
    for (int i = 0; i < 1000; i++)
        deep[k++] = ']';
    deep[k++] = '}';
    ok(srt_chat_template_render(t, deep, k, &out, &n, &err) == SRT_ERROR, "deeply nested context is refused");
    srt_chat_template_free(t);

    ok(srt_chat_template_render(NULL, "{}", 2, &out, &n, &err) == SRT_ERROR, "NULL template is an error");
    t = NULL;
    ok(srt_chat_template_compile(NULL, 0, &t, &err) == SRT_ERROR && t == NULL, "NULL source is an error");

    /* render-time failures give clear messages, and the template stays usable afterwards */
    const char *guard = "{% if messages[0].role == 'system' %}{{ raise_exception('no system role') }}{% endif %}ok";
    ok(srt_chat_template_compile(guard, strlen(guard), &t, &err) == SRT_OK, "compile a raising template");
    const char *sys = "{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}";
    const char *usr = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}";
    ok(srt_chat_template_render(t, sys, strlen(sys), &out, &n, &err) == SRT_ERROR &&
           strcmp(err.msg, "no system role") == 0, "raise_exception message comes through");
    ok(srt_chat_template_render(t, usr, strlen(usr), &out, &n, &err) == SRT_OK && strcmp(out, "ok") == 0,
       "template renders again after an exception");
    free(out);
    ok(srt_chat_template_render(t, "{}", 2, &out, &n, &err) == SRT_ERROR && strstr(err.msg, "undefined"),
       "attribute of undefined: %s", err.msg);
    srt_chat_template_free(t);

    /* hostile templates fail cleanly */
    const char *huge = "{{ 'x' * 1000000000000 }}";
    ok(srt_chat_template_compile(huge, strlen(huge), &t, &err) == SRT_OK &&
           srt_chat_template_render(t, "{}", 2, &out, &n, &err) == SRT_ERROR, "huge repetition is refused: %s",
       err.msg);
    srt_chat_template_free(t);
    const char *rec = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    ok(srt_chat_template_compile(rec, strlen(rec), &t, &err) == SRT_OK &&
           srt_chat_template_render(t, "{}", 2, &out, &n, &err) == SRT_ERROR && strstr(err.msg, "Recursion"),
       "runaway recursion is refused: %s", err.msg);
    srt_chat_template_free(t);
    const char *big_range = "{% for i in range(1000000) %}{% endfor %}";
    ok(srt_chat_template_compile(big_range, strlen(big_range), &t, &err) == SRT_OK &&
           srt_chat_template_render(t, "{}", 2, &out, &n, &err) == SRT_ERROR && strstr(err.msg, "Range"),
       "range beyond the sandbox limit is refused");
    srt_chat_template_free(t);
    char nest[2100];
    for (int i = 0; i < 1000; i++)
        nest[i] = '(';
    nest[1000] = '1';
    for (int i = 0; i < 1000; i++)
        nest[1001 + i] = ')';
    char nested_tpl[2200];
    snprintf(nested_tpl, sizeof(nested_tpl), "{{ %.*s }}", 2001, nest);
    ok(srt_chat_template_compile(nested_tpl, strlen(nested_tpl), &t, &err) == SRT_ERROR &&
           strstr(err.msg, "nested"), "deeply nested expression is refused at compile time");
}

/* Microseconds per render of SmolLM2's template on a 4-message conversation. Reported, not asserted. */
static void bench_smollm2(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/smollm2.json", fixture_dir());
    size_t len;
    char *json = slurp(path, &len);
    if (!json)
        return;
    char ebuf[256];
    yajl_val root = yajl_tree_parse(json, ebuf, sizeof(ebuf));
    free(json);
    const char *src = get_str(root, "source");
    srt_chat_template *t = NULL;
    srt_err err;
    if (srt_chat_template_compile(src, strlen(src), &t, &err) != SRT_OK) {
        yajl_tree_free(root);
        return;
    }
    const char *ctx = "{\"messages\": [{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"},"
                      " {\"role\": \"user\", \"content\": \"What is the capital of France?\"},"
                      " {\"role\": \"assistant\", \"content\": \"The capital of France is Paris.\"},"
                      " {\"role\": \"user\", \"content\": \"And of Germany?\"}],"
                      " \"add_generation_prompt\": true, \"tools\": null, \"documents\": null,"
                      " \"bos_token\": \"<|im_start|>\", \"eos_token\": \"<|im_end|>\"}";
    int iters = 20000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    size_t total = 0;
    for (int i = 0; i < iters; i++) {
        char *out;
        size_t n;
        if (srt_chat_template_render(t, ctx, strlen(ctx), &out, &n, &err) != SRT_OK)
            break;
        total += n;
        free(out);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / iters;
    tap_diag("smollm2 template, 4 messages (context JSON parse + render): %.2f us per render (%zu bytes out)", us,
             total / (size_t)iters);
    srt_chat_template_free(t);
    yajl_tree_free(root);
}

/* %-format widths and precisions of any length are refused, not overflowed (a fuzzer found
 * a signed overflow on a 25-digit width; under UBSan this test aborted) */
static void test_format_width(void)
{
    static const char *const srcs[] = { "{{ '%0000003181795956718829566s' % 'a' }}", "{{ '%.99999999999d' % 1 }}",
                                        "{{ '%10001s' % 'a' }}" };
    for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++) {
        srt_chat_template *t = NULL;
        srt_err err = { { 0 } };
        char *out = NULL;
        size_t len = 0;
        int rc = srt_chat_template_compile(srcs[i], strlen(srcs[i]), &t, &err);
        if (rc == SRT_OK)
            rc = srt_chat_template_render(t, "{}", 2, &out, &len, &err);
        ok(rc == SRT_ERROR && out == NULL && strstr(err.msg, "format width too large"),
           "%s: refused (%s)", srcs[i], err.msg);
        free(out);
        srt_chat_template_free(t);
    }
    srt_chat_template *t = NULL;
    srt_err err = { { 0 } };
    char *out = NULL;
    size_t len = 0;
    const char *src = "{{ '%10000s|' % 'a' }}";
    int rc = srt_chat_template_compile(src, strlen(src), &t, &err);
    if (rc == SRT_OK)
        rc = srt_chat_template_render(t, "{}", 2, &out, &len, &err);
    ok(rc == SRT_OK && len == 10001, "a width of 10000 still renders (%zu bytes)", len);
    free(out);
    srt_chat_template_free(t);
}

int main(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    test_all_templates();
    test_semantics();
    test_malformed();
    test_api();
    test_format_width();
    bench_smollm2();
    return tap_done();
}
