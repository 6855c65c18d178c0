/* Internal layout of srt_tokenizer, shared by the loaders, the encoder and the decoder. */
#ifndef SRT_TOK_INTERNAL_H
#define SRT_TOK_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "srt/common.h"
#include "srt/tokenizer.h"

/* ---------------------------------------------------------------- growable byte buffer */

typedef struct tok_buf {
    char *p;
    size_t len, cap;
} tok_buf;

int tok_buf_reserve(tok_buf *b, size_t extra);
int tok_buf_append(tok_buf *b, const void *s, size_t n);
void tok_buf_free(tok_buf *b);

/* ---------------------------------------------------------------- UTF-8 */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid or truncated. */
size_t tok_utf8_len(const uint8_t *s, size_t n);
int tok_utf8_valid(const uint8_t *s, size_t n);
/* Decodes one character of valid UTF-8; returns its length. */
size_t tok_utf8_decode(const uint8_t *s, uint32_t *cp);
size_t tok_utf8_encode(uint32_t cp, uint8_t *out);
int tok_is_whitespace(uint32_t cp); /* Unicode White_Space, = Rust char::is_whitespace */

/* ---------------------------------------------------------------- string -> id hash */

typedef struct tok_strmap {
    uint32_t *slots; /* id+1, 0 = empty */
    uint32_t mask;
} tok_strmap;

uint64_t tok_hash(const void *p, size_t n);

/* ---------------------------------------------------------------- tokens */

enum {
    TOKF_ADDED = 1,      /* from added_tokens */
    TOKF_SPECIAL = 2,    /* added token with special=true (or GGUF control) */
    TOKF_NORMALIZED = 4, /* added token matched after normalization */
    TOKF_LSTRIP = 8,
    TOKF_RSTRIP = 16,
    TOKF_SINGLE_WORD = 32,
    TOKF_IN_MODEL = 64,  /* present in the model vocab (reachable by BPE) */
};

typedef struct tok_entry {
    uint32_t str_off, str_len; /* the token as spelled in the vocab (UTF-8) */
    uint32_t key_off, key_len; /* what BPE matches: raw bytes for byte-level models, else = str */
    uint32_t dec_off, dec_len; /* decoder output for this token alone (after per-token decoder steps) */
    int16_t byte_val;          /* 0..255 for <0xNN> tokens when the decoder has ByteFallback, else -1 */
    uint16_t flags;
} tok_entry;

/* ---------------------------------------------------------------- pipeline steps */

enum tok_norm_kind { NORM_NFC, NORM_NFKC, NORM_PREPEND, NORM_REPLACE, NORM_STRIP };

typedef struct tok_norm {
    int kind;
    char *a, *b;      /* prepend: a; replace: a -> b */
    size_t alen, blen;
    int left, right;  /* strip */
} tok_norm;

enum tok_pretok_kind { PRE_SPLIT, PRE_BYTELEVEL, PRE_DIGITS, PRE_METASPACE, PRE_WHITESPACE_SPLIT };
enum tok_split_behavior { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };

typedef struct tok_pretok {
    int kind;
    pcre2_code *re;      /* split / bytelevel regex (JIT compiled) */
    pcre2_code *re_base; /* the same with PCRE2's own classes, for texts without any code point of
                            extra[] (most texts: HF's newer Unicode only adds rare scripts); NULL:
                            re has no additions */
    uint32_t (*extra)[2];/* the code point ranges re's classes add, sorted and merged */
    size_t n_extra;
    uint64_t extra_blocks[0x110000 / 256 / 64]; /* bit cp >> 8: a range meets that block */
    char *lit;           /* split on a literal string */
    size_t lit_len;
    int behavior, invert;
    int add_prefix_space; /* bytelevel */
    int individual;       /* digits */
    char repl[8];         /* metaspace replacement (UTF-8) */
    size_t repl_len;
    int prepend;          /* metaspace: 0 never, 1 first, 2 always */
    int split;            /* metaspace */
} tok_pretok;

/* Added-token matcher: a byte trie, leftmost-longest like HF's aho-corasick. */
typedef struct tok_trie_node {
    uint32_t first_edge, n_edges;
    int32_t token; /* id ending here or -1 */
} tok_trie_node;
typedef struct tok_trie_edge {
    uint8_t byte;
    uint32_t child;
} tok_trie_edge;
typedef struct tok_trie {
    tok_trie_node *nodes;
    tok_trie_edge *edges;
    uint32_t n_nodes, n_edges;
    uint8_t first[256]; /* first bytes that start some token */
} tok_trie;

#define TOK_CHAR_TABLE 0x3000

/* Word cache: direct mapped, fixed slots; used by one encode call at a time (try-lock). */
#define TOK_CACHE_SLOTS 8192
#define TOK_CACHE_WORD 22
#define TOK_CACHE_IDS 6
typedef struct tok_cache_slot {
    uint8_t len, n_ids;
    char word[TOK_CACHE_WORD];
    int32_t ids[TOK_CACHE_IDS];
} tok_cache_slot;

/* Decoder plan (see detok.c): per-token steps fold into each token's dec bytes. */
enum { DECOP_BYTELEVEL, DECOP_REPLACE, DECOP_BYTEFALLBACK, DECOP_METASPACE };
typedef struct tok_decop {
    int kind;
    char *a, *b;
    size_t alen, blen;
} tok_decop;

enum { DEC_LOSSY = 0, DEC_GROUPED = 1 };
enum { STRIP_NONE = 0, STRIP_TEXT = 1, STRIP_FIRST_TOKEN_REPL = 2 };

struct srt_tokenizer {
    char *name;
    tok_entry *tok;
    uint32_t n_tok, tok_cap;
    tok_buf pool;

    tok_strmap by_key; /* model vocab: key -> id */
    tok_strmap by_str; /* every token string -> id (added tokens win) */

    /* merges: (left,right) -> rank, result */
    struct tok_merge { int32_t left, right, result; uint32_t rank; } *merges;
    uint32_t merges_mask; /* open addressing table of size mask+1 */

    int byte_level;          /* vocab keys are raw bytes; BPE starts from bytes */
    int32_t byte_id[256];    /* byte-level: initial symbol for each byte */
    int32_t fallback_id[256];/* byte_fallback: <0xNN> ids (or -1) */
    int32_t *char_id;        /* not byte-level: model id of each code point below TOK_CHAR_TABLE, or -1 */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;          /* model unk token (-1) */

    tok_norm *norms;
    int n_norms;
    tok_pretok *pretoks;
    int n_pretoks;

    tok_trie trie_raw, trie_norm; /* added tokens matched before / after normalization */
    int has_norm_added;

    /* post-processor: ids before and after the sequence for a single input */
    int32_t *post_pre, *post_post;
    int n_post_pre, n_post_post;

    /* decoder */
    tok_decop *decops;
    int n_decops;
    int dec_mode;           /* DEC_LOSSY / DEC_GROUPED */
    int dec_strip;          /* STRIP_* */
    uint32_t dec_strip_n;   /* STRIP_TEXT: number of leading chars */
    uint32_t dec_strip_cp;  /* STRIP_TEXT: the char stripped */
    char dec_repl[8];       /* STRIP_FIRST_TOKEN_REPL: replacement removed from the first token */
    size_t dec_repl_len;
    int dec_join_space;     /* no decoder: tokens joined with " " */
    size_t max_dec_len;

    int32_t bos_id, eos_id, pad_id;
    char *bos_str, *eos_str, *chat_template;
    int adds_bos;

    pthread_mutex_t cache_lock;
    tok_cache_slot *cache;
};

/* tokenizer.c */
srt_tokenizer *tok_new(const char *name);
int tok_add_token(srt_tokenizer *t, int32_t id, const char *s, size_t n, uint16_t flags, srt_err *err);
int tok_finish(srt_tokenizer *t, srt_err *err); /* after vocab/added/merges/pipeline are set */
int tok_add_merge(srt_tokenizer *t, int32_t left, int32_t right, int32_t result, uint32_t rank, srt_err *err);
int tok_alloc_merges(srt_tokenizer *t, size_t n, srt_err *err);
int32_t tok_lookup(const srt_tokenizer *t, const tok_strmap *m, const char *s, size_t n, int by_key);
int tok_compile_regex(tok_pretok *p, const char *pattern, const char *where, srt_err *err);
/* The Digits pre-tokenizer's class (Rust's char::is_numeric), one character or a run. */
int tok_compile_numeric(tok_pretok *p, int individual, const char *where, srt_err *err);
char *tok_strdup(const char *s);
char *tok_strndup(const char *s, size_t n);

/* bytelevel map: byte -> code point of GPT-2's printable alphabet and back */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp); /* -1 if not in the alphabet */

/* bpe.c */
typedef struct tok_sym {
    int32_t id, prev, next;
    uint32_t len;
} tok_sym;
typedef struct tok_bpe_work {
    tok_sym *syms;
    size_t syms_cap;
    struct tok_heap_ent { uint64_t key; int32_t result; } *heap;
    size_t heap_cap;
} tok_bpe_work;
void tok_bpe_work_free(tok_bpe_work *w);

typedef struct piece {
    size_t off, len; /* in the scratch arena */
    int at0;         /* starts at offset 0 of the original text (Metaspace prepend_scheme=first) */
} piece;

/* Per-call scratch: a tokenizer is shared read-only, everything mutable lives here. */
typedef struct tok_scratch {
    tok_buf arena; /* normalized / transformed text */
    tok_buf tmp;
    piece *pa, *pb; /* ping-pong piece lists */
    size_t pa_n, pb_n, p_cap;
    pcre2_match_data *md;
    tok_buf ids; /* int32 ids */
    tok_bpe_work bpe;
    void *segs; /* regex split segments */
    size_t segcap;
    int cache_held;
} tok_scratch;

const struct tok_merge *tok_find_merge(const srt_tokenizer *t, int32_t left, int32_t right);
int tok_bpe_word(const srt_tokenizer *t, tok_scratch *s, const char *w, size_t n, tok_buf *ids, srt_err *err);

/* nfc.c */
int tok_nfc_needed(const char *s, size_t n, int compat);
int tok_nfc(const char *s, size_t n, int compat, tok_buf *out); /* compat: NFKC */

/* detok.c */
int tok_build_decoder_plan(srt_tokenizer *t, srt_err *err);

#endif
