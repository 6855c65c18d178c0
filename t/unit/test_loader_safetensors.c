/* HF checkpoint loading: config.json and safetensors (single file, sharded index; F32, F16,
 * BF16). Sharded and single files of the same weights give identical logits; F16/BF16 files
 * give the logits of their rounded weights; corrupt files and configs fail with one clear
 * message naming the file and the tensor or field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/tensor_store.h"
#include "srt/model.h"
#include "tap.h"
#include "tiny_model_writer.h"

static char tmpdir[256];

static int logits_of(const char *path, float *out, char *msg)
{
    tw_run t;
    int32_t ids[6] = { 3, 50, 7, 91, 12, 1 }, pos[6] = { 0, 1, 2, 3, 4, 5 }, slots[6] = { 0, 1, 2, 3, 4, 5 };
    int32_t start[2] = { 0, 6 }, len = 6;
    const int32_t *ss[1] = { slots };
    srt_runner_opts o = { .max_batch_tokens = 8, .max_seqs = 1, .n_threads = 1 };
    if (tw_run_open(&t, path, &o, 8) != SRT_OK)
        return tw_run_close(&t, SRT_ERROR, msg);
    srt_forward_batch b = { .n_tokens = 6, .token_ids = ids, .positions = pos, .out_slots = slots, .n_seqs = 1,
                            .seq_start = start, .seq_len = &len, .seq_slots = ss };
    return tw_run_close(&t, srt_runner_forward(t.r, t.kv, &b, out, &t.err), msg);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static unsigned char *slurp(const char *p, long *n)
{
    FILE *f = fopen(p, "rb");
    if (!f) {
        *n = 0;
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n)
        *n = 0;
    fclose(f);
    return b;
}

/* loading dir must fail with a message containing both needles */
static int fails_with(const char *dir, const char *n1, const char *n2, char *msg)
{
    srt_model *m = NULL;
    srt_err err = { { 0 } };
    int rc = srt_model_load(dir, &m, &err);
    srt_model_free(m);
    snprintf(msg, 1024, "%s", err.msg);
    return rc == SRT_ERROR && (!n1 || strstr(err.msg, n1)) && (!n2 || strstr(err.msg, n2));
}

static void formats(void)
{
    tw_model m;
    char d1[512], d2[512], d3[512], msg[1024];
    float a[96], b[96];
    tw_make(&m, "llama", 11);
    snprintf(d1, sizeof d1, "%s/single", tmpdir);
    snprintf(d2, sizeof d2, "%s/sharded", tmpdir);
    tw_write_hf(&m, d1, 1, "F32");
    tw_write_hf(&m, d2, 3, "F32");
    int ra = logits_of(d1, a, msg);
    if (ra)
        tap_diag("%s", msg);
    int rb = logits_of(d2, b, msg);
    if (rb)
        tap_diag("%s", msg);
    ok(ra == SRT_OK && rb == SRT_OK && tw_max_diff(a, b, 96) == 0, "3 shards through the index == one file (diff %g)",
       tw_max_diff(a, b, 96));

    for (int k = 0; k < 2; k++) {
        const char *dt = k ? "F16" : "BF16";
        tw_model r;
        tw_make(&r, "qwen2", 13);
        /* the F32 reference holds the rounded values, so the results must agree closely */
        for (int i = 0; i < r.n; i++)
            for (int64_t j = 0; j < tw_numel(&r.t[i]); j++) {
                float v = r.t[i].data[j];
                uint32_t u;
                if (k) {
                    uint16_t h = tw_f32_to_f16(v);
                    /* f16 -> f32 for normal numbers */
                    uint32_t e = (h >> 10) & 0x1f, mant = h & 0x3ff;
                    u = ((uint32_t)(h & 0x8000) << 16) | (e ? ((e - 15 + 127) << 23) | (mant << 13) : 0);
                } else
                    u = (uint32_t)tw_f32_to_bf16(v) << 16;
                memcpy(&r.t[i].data[j], &u, 4);
            }
        snprintf(d1, sizeof d1, "%s/ref-%s", tmpdir, dt);
        snprintf(d3, sizeof d3, "%s/half-%s", tmpdir, dt);
        tw_write_hf(&r, d1, 1, "F32");
        tw_write_hf(&r, d3, 2, dt);
        ra = logits_of(d1, a, msg);
        rb = logits_of(d3, b, msg);
        if (rb)
            tap_diag("%s", msg);
        ok(ra == SRT_OK && rb == SRT_OK && tw_max_diff(a, b, 96) < 2e-4,
           "%s safetensors (qwen2: biases, tied embeddings) == F32 of the same values (diff %.2g)", dt, tw_max_diff(a, b, 96));
        tw_free(&r);
    }
    tw_free(&m);
}

/* a one-file F32 checkpoint of tw_make(seed) in tmpdir/sub; returns the safetensors file's bytes */
static unsigned char *write_checkpoint(tw_model *m, int seed, const char *sub, char *dir, char *st, long *n,
                                       uint64_t *hlen)
{
    tw_make(m, "llama", seed);
    snprintf(dir, 512, "%s/%s", tmpdir, sub);
    snprintf(st, 600, "%s/model.safetensors", dir);
    tw_write_hf(m, dir, 1, "F32");
    unsigned char *orig = slurp(st, n);
    memcpy(hlen, orig, 8);
    return orig;
}

static void corrupt(void)
{
    tw_model m;
    char dir[512], st[600], cfg[600], idx[600], msg[1024];
    long n;
    uint64_t hlen;
    unsigned char *orig = write_checkpoint(&m, 17, "bad", dir, st, &n, &hlen);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);

    int all = 1, count = 0;
    for (long len = 0; len < n && all; len += len < (long)hlen + 16 ? 3 : 1999) {
        write_file(st, orig, (size_t)len);
        all = fails_with(dir, st, NULL, msg);
        count++;
        if (!all)
            tap_diag("truncated to %ld: %s", len, msg);
    }
    ok(all, "%d truncations of model.safetensors each fail naming the file", count);
    write_file(st, orig, (size_t)n - 100);
    ok(fails_with(dir, st, "lm_head.weight", msg) && strstr(msg, "past the end"),
       "truncated data names the last tensor: %s", msg);

    unsigned char *b = malloc((size_t)n);
#define MUT(stmt) do { memcpy(b, orig, (size_t)n); stmt; write_file(st, b, (size_t)n); } while (0)
    MUT(memset(b, 0xff, 8));
    ok(fails_with(dir, st, "header length", msg), "absurd header length: %s", msg);
    MUT(b[8] = '[');
    ok(fails_with(dir, st, "not a JSON object", msg), "header not JSON: %s", msg);
    MUT(memset(b + 8, ' ', hlen); memset(b + 8, '[', hlen / 2); memset(b + 8 + hlen / 2, ']', hlen / 2));
    ok(fails_with(dir, st, "nested deeper than 64", msg), "header nested %u deep: %s", (unsigned)(hlen / 2), msg);
    {
        /* rewrite one entry's fields in place, keeping the header length */
        char *h = (char *)b + 8;
        MUT((void)0);
        char *p = strstr(h, "\"model.layers.1.mlp.up_proj.weight\"");
        char *dt = strstr(p, "\"F32\"");
        memcpy(dt, "\"F64\"", 5);
        write_file(st, b, (size_t)n);
        ok(fails_with(dir, "model.layers.1.mlp.up_proj.weight", "unsupported dtype F64", msg),
           "a used tensor of an unsupported dtype: %s", msg);
        MUT((void)0);
        p = strstr(h, "\"model.layers.0.self_attn.v_proj.weight\"");
        char *sh = strstr(p, "[32, 64]");
        memcpy(sh, "[32, 65]", 8);
        write_file(st, b, (size_t)n);
        ok(fails_with(dir, st, "model.layers.0.self_attn.v_proj.weight", msg) && strstr(msg, "bytes of data"),
           "shape that does not match the byte range: %s", msg);
        MUT((void)0);
        p = strstr(h, "\"model.norm.weight\"");
        char *of = strstr(p, "data_offsets\": [");
        of += strlen("data_offsets\": [");
        *of = '9';   /* first digit of the begin offset: begin > end or misplaced */
        write_file(st, b, (size_t)n);
        ok(fails_with(dir, st, "model.norm.weight", msg), "bad data_offsets name the tensor: %s", msg);
        MUT((void)0);
        p = strstr(h, "\"model.norm.weight\"");
        memcpy(p + 1, "model.xorm", 10);
        write_file(st, b, (size_t)n);
        ok(fails_with(dir, "model.norm.weight", "missing", msg), "a missing tensor is named: %s", msg);
    }
#undef MUT
    write_file(st, orig, (size_t)n);
    ok(!fails_with(dir, NULL, NULL, msg), "the restored file loads again");

    /* config.json */
    static const struct { const char *json; const char *needle; } cfgs[] = {
        { "{\"architectures\": [\"GPT2LMHeadModel\"]}", "GPT2LMHeadModel" },
        { "{\"hidden_size\": 64}", "architectures" },
        { "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 96, \"hidden_size\": 64}", "intermediate_size" },
        { "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 96, \"hidden_size\": 64, \"intermediate_size\": 96, "
          "\"num_hidden_layers\": 2, \"num_attention_heads\": 3}", "num_attention_heads" },
        { "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": -4, \"hidden_size\": 64}", "vocab_size" },
        { "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 96, \"hidden_size\": 64, \"intermediate_size\": 96, "
          "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}", "yarn" },
        { "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 96, \"hidden_size\": 64, \"intermediate_size\": 96, "
          "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"rms_norm_eps\": \"x\"}", "rms_norm_eps" },
        { "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 96, \"hidden_size\": 64, \"intermediate_size\": 96, "
          "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 3}", "num_key_value_heads" },
        { "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 95, \"hidden_size\": 64, \"intermediate_size\": 96, "
          "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, "
          "\"tie_word_embeddings\": false}", "model.embed_tokens.weight" },
        { "{\"architectures\": [\"LlamaForCausalLM\"], ", "config.json" },
        { "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 96, \"hidden_size\": 64, \"intermediate_size\": 96, "
          "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_act\": \"gelu\"}", "gelu" },
        { "{\"architectures\": [\"Qwen2ForCausalLM\"], \"vocab_size\": 96, \"hidden_size\": 64, \"intermediate_size\": 96, "
          "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"use_sliding_window\": true}", "sliding" },
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        write_file(cfg, cfgs[i].json, strlen(cfgs[i].json));
        ok(fails_with(dir, cfgs[i].needle, NULL, msg) && strstr(msg, dir), "config.json case %zu: %s", i, msg);
    }
    /* llama3 rope scaling is accepted, with its parameters */
    tw_write_config(&m, dir, "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                             "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}");
    {
        srt_model *mm = NULL;
        srt_err e;
        int rc = srt_model_load(dir, &mm, &e);
        const srt_model_config *c = rc == SRT_OK ? srt_model_config_of(mm) : NULL;
        ok(c && c->rope_type == SRT_ROPE_LLAMA3 && c->rope_factor == 8.0f && c->rope_original_max_pos == 64,
           "llama3 rope_scaling parsed");
        srt_model_free(mm);
    }
    tw_write_config(&m, dir, NULL);

    /* sharded index problems */
    tw_write_hf(&m, dir, 2, "F32");
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    char shard2[700];
    snprintf(shard2, sizeof shard2, "%s/model-00002-of-00002.safetensors", dir);
    unlink(shard2);
    ok(fails_with(dir, "model-00002-of-00002.safetensors", NULL, msg), "missing shard: %s", msg);
    {
        static const char outside[] = "{\"weight_map\": {\"model.norm.weight\": \"../../etc/passwd\"}}";
        write_file(idx, outside, sizeof outside - 1);
    }
    ok(fails_with(dir, "plain file name", NULL, msg), "a shard outside the directory is refused: %s", msg);
    {
        static const char bad_map[] = "{\"weight_map\": {\"x.weight\": \"model-00001-of-00002.safetensors\"}}";
        write_file(idx, bad_map, sizeof bad_map - 1);   /* its length, not a count that was one too many */
    }
    ok(fails_with(dir, "x.weight", "missing from shard", msg), "index names a tensor its shard lacks: %s", msg);
    write_file(idx, "{\"weight_map\": 3}", 17);
    ok(fails_with(dir, idx, "weight_map", msg), "index without a weight_map: %s", msg);
    free(orig);
    free(b);
    tw_free(&m);
}

/* srt_safetensors_load_buffer: the parser behind srt_safetensors_load over a caller's buffer
 * (the fuzzer's entry). Truncations are copied into buffers of exactly their size, so under
 * ASan a read past the end is caught. */
static void buffer_entry(void)
{
    tw_model m;
    char dir[512], st[600];
    long n;
    uint64_t hlen;
    unsigned char *orig = write_checkpoint(&m, 19, "buf", dir, st, &n, &hlen);

    srt_tensor_store sf = { 0 }, sb = { 0 };
    srt_err err = { { 0 } };
    int rf = srt_safetensors_load(st, &sf, &err);
    int rb = srt_safetensors_load_buffer(orig, (size_t)n, "mem.safetensors", &sb, &err);
    if (rb != SRT_OK)
        tap_diag("%s", err.msg);
    int same = rf == SRT_OK && rb == SRT_OK && sf.n_tensors == sb.n_tensors && sf.n_tensors > 0;
    for (int32_t i = 0; same && i < sb.n_tensors; i++) {
        const srt_tensor_entry *a = &sb.tensors[i], *f = srt_store_find(&sf, a->name);
        same = f && f->dtype == a->dtype && f->nbytes == a->nbytes && memcmp(f->data, a->data, a->nbytes) == 0 &&
               (const unsigned char *)a->data >= orig + 8 + hlen &&
               (const unsigned char *)a->data + a->nbytes <= orig + n && strcmp(a->file, "mem.safetensors") == 0;
    }
    ok(same, "a safetensors file's bytes in memory load as the file does, tensors pointing into the buffer");
    srt_store_free(&sf);
    srt_store_free(&sb);   /* must not munmap or free the caller's buffer: ASan would say */

    int all = 1, named = 1, count = 0;
    for (long len = 0; len < n && all; len += len < (long)hlen + 16 ? 1 : 1999) {
        unsigned char *t = malloc(len ? (size_t)len : 1);
        memcpy(t, orig, (size_t)len);
        srt_tensor_store s = { 0 };
        srt_err e2 = { { 0 } };
        all = srt_safetensors_load_buffer(t, (size_t)len, "mem.safetensors", &s, &e2) == SRT_ERROR;
        named = named && strstr(e2.msg, "mem.safetensors") &&
                (strstr(e2.msg, "truncated") || strstr(e2.msg, "corrupt") || strstr(e2.msg, "not a JSON object"));
        if (!all || !named)
            tap_diag("buffer of %ld bytes: %s", len, all ? e2.msg : "loaded");
        srt_store_free(&s);
        free(t);
        count++;
    }
    ok(all && named, "%d truncated buffers each fail, the message naming the buffer and the damage", count);
    {
        srt_tensor_store s = { 0 };
        srt_err e2 = { { 0 } };
        unsigned char *b = malloc((size_t)n);
        memcpy(b, orig, (size_t)n);
        memset(b + 4, 0x7f, 4);   /* header length far past the end */
        int rc = srt_safetensors_load_buffer(b, (size_t)n, "mem.safetensors", &s, &e2);
        ok(rc == SRT_ERROR && strstr(e2.msg, "mem.safetensors: corrupt safetensors header length"),
           "a corrupt header length in a buffer: %s", e2.msg);
        srt_store_free(&s);
        memcpy(b, orig, (size_t)n);
        b[8] = '[';   /* the header JSON is no longer an object */
        rc = srt_safetensors_load_buffer(b, (size_t)n, "mem.safetensors", &s, &e2);
        ok(rc == SRT_ERROR && strstr(e2.msg, "mem.safetensors: safetensors header is not a JSON object"),
           "a corrupt header in a buffer: %s", e2.msg);
        srt_store_free(&s);
        rc = srt_safetensors_load_buffer(NULL, 0, "empty", &s, &e2);
        ok(rc == SRT_ERROR && strstr(e2.msg, "empty: truncated safetensors file (0 bytes)"),
           "an empty buffer: %s", e2.msg);
        free(b);
    }
    free(orig);
    tw_free(&m);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/srt_test_st_%d", (int)getpid());
    mkdir(tmpdir, 0755);
    formats();
    corrupt();
    buffer_entry();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", tmpdir);
    return tap_done();
}
