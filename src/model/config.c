/* Model hyper-parameters from an HF config.json or from GGUF metadata. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#include "model/config.h"
#include "model/gguf.h"


static void config_defaults(srt_model_config *c)
{
    memset(c, 0, sizeof *c);
    c->rope_theta = 10000.0f;
    c->rms_norm_eps = 1e-6f;
    c->bos_token_id = -1;
    c->pad_token_id = -1;
    c->rope_factor = 1.0f;
}

static yajl_val jget(yajl_val obj, const char *key)
{
    const char *path[] = { key, NULL };
    return obj ? yajl_tree_get(obj, path, yajl_t_any) : NULL;
}

/* Integer field: required fields fail when absent; optional keep *out. */
static int jint(yajl_val obj, const char *key, int32_t *out, int required, const char *path, srt_err *err)
{
    yajl_val v = jget(obj, key);
    if (!v || YAJL_IS_NULL(v)) {
        if (required)
            return srt_err_set(err, "%s: field \"%s\" is missing", path, key);
        return SRT_OK;
    }
    if (!YAJL_IS_INTEGER(v) || YAJL_GET_INTEGER(v) < 0 || YAJL_GET_INTEGER(v) > INT32_MAX)
        return srt_err_set(err, "%s: field \"%s\" must be a non-negative integer", path, key);
    *out = (int32_t)YAJL_GET_INTEGER(v);
    return SRT_OK;
}

static int jfloat(yajl_val obj, const char *key, float *out, const char *path, srt_err *err)
{
    yajl_val v = jget(obj, key);
    if (!v || YAJL_IS_NULL(v))
        return SRT_OK;
    if (!YAJL_IS_NUMBER(v))
        return srt_err_set(err, "%s: field \"%s\" must be a number", path, key);
    *out = (float)YAJL_GET_DOUBLE(v);
    if (YAJL_IS_INTEGER(v))
        *out = (float)YAJL_GET_INTEGER(v);
    return SRT_OK;
}

static int parse_eos(yajl_val v, srt_model_config *c, const char *path, srt_err *err)
{
    if (!v || YAJL_IS_NULL(v))
        return SRT_OK;
    c->n_eos = 0;
    if (YAJL_IS_INTEGER(v)) {
        c->eos_token_ids[c->n_eos++] = (int32_t)YAJL_GET_INTEGER(v);
        return SRT_OK;
    }
    if (!YAJL_IS_ARRAY(v))
        return srt_err_set(err, "%s: field \"eos_token_id\" must be an integer or a list", path);
    for (size_t i = 0; i < v->u.array.len && c->n_eos < SRT_MAX_EOS; i++) {
        yajl_val e = v->u.array.values[i];
        if (!YAJL_IS_INTEGER(e))
            return srt_err_set(err, "%s: field \"eos_token_id\" has a non-integer entry", path);
        c->eos_token_ids[c->n_eos++] = (int32_t)YAJL_GET_INTEGER(e);
    }
    return SRT_OK;
}

static int parse_rope(yajl_val rs, srt_model_config *c, const char *path, srt_err *err)
{
    if (!rs || YAJL_IS_NULL(rs))
        return SRT_OK;
    if (!YAJL_IS_OBJECT(rs))
        return srt_err_set(err, "%s: \"rope_scaling\" must be an object", path);
    if (jfloat(rs, "rope_theta", &c->rope_theta, path, err) != SRT_OK)
        return SRT_ERROR;
    yajl_val t = jget(rs, "rope_type");
    if (!t)
        t = jget(rs, "type");
    const char *type = t && YAJL_IS_STRING(t) ? YAJL_GET_STRING(t) : "default";
    if (strcmp(type, "default") == 0) {
        c->rope_type = SRT_ROPE_DEFAULT;
        return SRT_OK;
    }
    if (jfloat(rs, "factor", &c->rope_factor, path, err) != SRT_OK)
        return SRT_ERROR;
    if (!(c->rope_factor > 0))
        return srt_err_set(err, "%s: rope_scaling \"factor\" must be positive", path);
    if (strcmp(type, "linear") == 0) {
        c->rope_type = SRT_ROPE_LINEAR;
        return SRT_OK;
    }
    if (strcmp(type, "llama3") == 0) {
        c->rope_type = SRT_ROPE_LLAMA3;
        c->rope_low_freq_factor = 1.0f;
        c->rope_high_freq_factor = 4.0f;
        c->rope_original_max_pos = 8192;
        if (jfloat(rs, "low_freq_factor", &c->rope_low_freq_factor, path, err) != SRT_OK ||
            jfloat(rs, "high_freq_factor", &c->rope_high_freq_factor, path, err) != SRT_OK ||
            jint(rs, "original_max_position_embeddings", &c->rope_original_max_pos, 0, path, err) != SRT_OK)
            return SRT_ERROR;
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor) || c->rope_original_max_pos <= 0)
            return srt_err_set(err, "%s: llama3 rope_scaling needs high_freq_factor > low_freq_factor", path);
        return SRT_OK;
    }
    return srt_err_set(err, "%s: rope_scaling type \"%s\" is not supported (default, linear, llama3)", path, type);
}

int srt_config_check(srt_model_config *c, const char *path, srt_err *err)
{
    if (c->hidden_size <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->vocab_size <= 0 ||
        c->intermediate_size <= 0)
        return srt_err_set(err, "%s: hidden_size, num_hidden_layers, num_attention_heads, vocab_size and intermediate_size must be positive", path);
    if (c->n_kv_heads <= 0)
        c->n_kv_heads = c->n_heads;
    if (c->head_dim <= 0) {
        if (c->hidden_size % c->n_heads)
            return srt_err_set(err, "%s: hidden_size %d is not a multiple of num_attention_heads %d", path,
                               c->hidden_size, c->n_heads);
        c->head_dim = c->hidden_size / c->n_heads;
    }
    if (c->n_heads % c->n_kv_heads)
        return srt_err_set(err, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", path,
                           c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2 || c->head_dim > 1024)
        return srt_err_set(err, "%s: head_dim %d must be even and at most 1024", path, c->head_dim);
    if (c->n_layers > 4096 || c->hidden_size > (1 << 20) || c->intermediate_size > (1 << 22) || c->n_heads > 1024)
        return srt_err_set(err, "%s: implausible model dimensions", path);
    if (!(c->rms_norm_eps > 0) || !(c->rope_theta > 0))
        return srt_err_set(err, "%s: rms_norm_eps and rope_theta must be positive", path);
    c->qk_norm = c->arch == SRT_ARCH_QWEN3;
    c->qk_rows_permuted = c->is_gguf && c->arch == SRT_ARCH_LLAMA;
    return SRT_OK;
}

int srt_config_from_json(const char *dir, srt_model_config *c, srt_err *err)
{
    char path[4096], ebuf[256];
    config_defaults(c);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text;
    if (srt_read_file(path, 16u << 20, &text, NULL, err) != SRT_OK)
        return SRT_ERROR;
    if (srt_json_depth(text, strlen(text)) > SRT_JSON_MAX_DEPTH) {
        free(text);
        return srt_err_set(err, "%s: JSON nested deeper than %d levels", path, SRT_JSON_MAX_DEPTH);
    }
    yajl_val root = yajl_tree_parse(text, ebuf, sizeof ebuf);
    free(text);
    if (!root || !YAJL_IS_OBJECT(root)) {
        char *nl = strchr(ebuf, '\n');
        if (nl)
            *nl = 0;
        yajl_tree_free(root);
        return srt_err_set(err, "%s: not a JSON object%s%s", path, root ? "" : ": ", root ? "" : ebuf);
    }
    int rc = SRT_ERROR;
    yajl_val archs = jget(root, "architectures");
    const char *arch = NULL;
    if (archs && YAJL_IS_ARRAY(archs) && archs->u.array.len > 0 && YAJL_IS_STRING(archs->u.array.values[0]))
        arch = YAJL_GET_STRING(archs->u.array.values[0]);
    if (!arch) {
        srt_err_set(err, "%s: field \"architectures\" is missing", path);
        goto out;
    }
    snprintf(c->architecture, sizeof c->architecture, "%s", arch);
    if (strcmp(arch, "LlamaForCausalLM") == 0)
        c->arch = SRT_ARCH_LLAMA;
    else if (strcmp(arch, "Qwen2ForCausalLM") == 0)
        c->arch = SRT_ARCH_QWEN2;
    else if (strcmp(arch, "Qwen3ForCausalLM") == 0)
        c->arch = SRT_ARCH_QWEN3;
    else {
        srt_err_set(err, "%s: architecture \"%s\" is not supported (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)", path, arch);
        goto out;
    }
    if (jint(root, "vocab_size", &c->vocab_size, 1, path, err) ||
        jint(root, "hidden_size", &c->hidden_size, 1, path, err) ||
        jint(root, "intermediate_size", &c->intermediate_size, 1, path, err) ||
        jint(root, "num_hidden_layers", &c->n_layers, 1, path, err) ||
        jint(root, "num_attention_heads", &c->n_heads, 1, path, err) ||
        jint(root, "num_key_value_heads", &c->n_kv_heads, 0, path, err) ||
        jint(root, "head_dim", &c->head_dim, 0, path, err) ||
        jint(root, "max_position_embeddings", &c->max_position_embeddings, 0, path, err) ||
        jint(root, "bos_token_id", &c->bos_token_id, 0, path, err) ||
        jint(root, "pad_token_id", &c->pad_token_id, 0, path, err) ||
        jfloat(root, "rms_norm_eps", &c->rms_norm_eps, path, err) ||
        jfloat(root, "rope_theta", &c->rope_theta, path, err) ||
        parse_eos(jget(root, "eos_token_id"), c, path, err))
        goto out;
    /* transformers 4 writes rope_scaling; 5 writes rope_parameters (with rope_theta inside) */
    if (parse_rope(jget(root, "rope_scaling"), c, path, err) || parse_rope(jget(root, "rope_parameters"), c, path, err))
        goto out;
    yajl_val act = jget(root, "hidden_act");
    const char *act_name = act && YAJL_IS_STRING(act) ? act->u.string : NULL;
    if (act_name && strcmp(act_name, "silu") != 0) {
        srt_err_set(err, "%s: hidden_act \"%s\" is not supported (silu)", path, act_name);
        goto out;
    }
    /* Qwen2 sliding-window attention changes results past the window: refuse it rather than
     * compute something else (windowless configs set use_sliding_window false) */
    yajl_val usw = jget(root, "use_sliding_window");
    if (usw && YAJL_IS_TRUE(usw)) {
        srt_err_set(err, "%s: use_sliding_window is true; sliding-window attention is not supported", path);
        goto out;
    }
    yajl_val tie = jget(root, "tie_word_embeddings");
    c->tie_word_embeddings = tie ? YAJL_IS_TRUE(tie) : 0;
    if (srt_config_check(c, path, err) != SRT_OK)
        goto out;
    rc = SRT_OK;

    /* generation_config.json may list more stop ids (Llama 3 instruct) */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    srt_err ignored;
    char *gtext;
    if (srt_read_file(path, 1u << 20, &gtext, NULL, &ignored) == SRT_OK) {
        yajl_val g = srt_json_depth(gtext, strlen(gtext)) > SRT_JSON_MAX_DEPTH
                         ? NULL : yajl_tree_parse(gtext, ebuf, sizeof ebuf);
        free(gtext);
        if (g && YAJL_IS_OBJECT(g))
            (void)parse_eos(jget(g, "eos_token_id"), c, path, &ignored);
        yajl_tree_free(g);
    }
out:
    yajl_tree_free(root);
    return rc;
}

int srt_config_from_gguf(const srt_gguf *g, const char *path, srt_model_config *c, srt_err *err)
{
    srt_gguf_str a;
    char arch[32], key[128];
    int64_t v;
    config_defaults(c);
    c->is_gguf = 1;
    if (srt_gguf_get_str(g, "general.architecture", &a) != SRT_OK)
        return srt_err_set(err, "%s: metadata field 'general.architecture' is missing", path);
    snprintf(arch, sizeof arch, "%.*s", (int)(a.len < 31 ? a.len : 31), a.ptr);
    if (strcmp(arch, "llama") == 0) {
        c->arch = SRT_ARCH_LLAMA;
        snprintf(c->architecture, sizeof c->architecture, "LlamaForCausalLM");
    } else if (strcmp(arch, "qwen2") == 0) {
        c->arch = SRT_ARCH_QWEN2;
        snprintf(c->architecture, sizeof c->architecture, "Qwen2ForCausalLM");
    } else if (strcmp(arch, "qwen3") == 0) {
        c->arch = SRT_ARCH_QWEN3;
        snprintf(c->architecture, sizeof c->architecture, "Qwen3ForCausalLM");
    } else
        return srt_err_set(err, "%s: GGUF architecture '%s' is not supported (llama, qwen2, qwen3)", path, arch);

    static const struct { const char *suffix; size_t off; int required; } ints[] = {
        { "block_count", offsetof(srt_model_config, n_layers), 1 },
        { "embedding_length", offsetof(srt_model_config, hidden_size), 1 },
        { "feed_forward_length", offsetof(srt_model_config, intermediate_size), 1 },
        { "attention.head_count", offsetof(srt_model_config, n_heads), 1 },
        { "attention.head_count_kv", offsetof(srt_model_config, n_kv_heads), 0 },
        { "attention.key_length", offsetof(srt_model_config, head_dim), 0 },
        { "context_length", offsetof(srt_model_config, max_position_embeddings), 0 },
        { "vocab_size", offsetof(srt_model_config, vocab_size), 0 },
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, ints[i].suffix);
        if (srt_gguf_get_i64(g, key, &v) != SRT_OK) {
            if (ints[i].required)
                return srt_err_set(err, "%s: metadata field '%s' is missing or not an integer", path, key);
            continue;
        }
        if (v < 0 || v > INT32_MAX)
            return srt_err_set(err, "%s: metadata field '%s' is out of range", path, key);
        *(int32_t *)((char *)c + ints[i].off) = (int32_t)v;
    }
    if (c->vocab_size == 0) {
        const srt_gguf_kv *tok = srt_gguf_find(g, "tokenizer.ggml.tokens");
        if (tok && tok->type == SRT_GGUF_ARRAY && tok->arr_n < INT32_MAX)
            c->vocab_size = (int32_t)tok->arr_n;
    }
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if (srt_gguf_get_f32(g, key, &c->rms_norm_eps) != SRT_OK)
        return srt_err_set(err, "%s: metadata field '%s' is missing", path, key);
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    (void)srt_gguf_get_f32(g, key, &c->rope_theta);
    srt_gguf_str st;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (srt_gguf_get_str(g, key, &st) == SRT_OK && !(st.len == 4 && memcmp(st.ptr, "none", 4) == 0)) {
        if (st.len == 6 && memcmp(st.ptr, "linear", 6) == 0) {
            c->rope_type = SRT_ROPE_LINEAR;
            snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
            if (srt_gguf_get_f32(g, key, &c->rope_factor) != SRT_OK || !(c->rope_factor > 0))
                return srt_err_set(err, "%s: metadata field '%s' is missing or not positive", path, key);
        } else
            return srt_err_set(err, "%s: GGUF rope scaling '%.*s' is not supported", path, (int)st.len, st.ptr);
    }
    if (srt_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &v) == SRT_OK && v <= INT32_MAX)
        c->bos_token_id = (int32_t)v;
    if (srt_gguf_get_i64(g, "tokenizer.ggml.padding_token_id", &v) == SRT_OK && v <= INT32_MAX)
        c->pad_token_id = (int32_t)v;
    if (srt_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &v) == SRT_OK && v <= INT32_MAX)
        c->eos_token_ids[c->n_eos++] = (int32_t)v;
    if (srt_gguf_get_i64(g, "tokenizer.ggml.eot_token_id", &v) == SRT_OK && v <= INT32_MAX &&
        (c->n_eos == 0 || c->eos_token_ids[0] != v))
        c->eos_token_ids[c->n_eos++] = (int32_t)v;
    return srt_config_check(c, path, err);
}
