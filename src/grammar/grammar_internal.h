/* Private to src/grammar: the grammar's syntax tree, its byte automaton and the matcher's stacks. */
#ifndef SRT_GRAMMAR_INTERNAL_H
#define SRT_GRAMMAR_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

#include "srt/grammar.h"

/* ---- syntax tree (gbnf.c builds it, nfa.c compiles it) ---- */

typedef enum {
    AST_EMPTY,      /* matches "" */
    AST_BYTES,      /* a literal byte string: str/len */
    AST_CLASS,      /* a set of code points: ranges[0..n_ranges) as [lo, hi] pairs, already
                       complemented when the class was negated */
    AST_SEQ,        /* kids in order */
    AST_ALT,        /* one of kids */
    AST_REPEAT,     /* kids[0] min..max times (max -1 = unbounded) */
    AST_REF         /* rule `ref` */
} ast_kind;

typedef struct ast {
    ast_kind     kind;
    int          min, max;
    int          ref;
    int          n_kids, cap_kids;
    struct ast **kids;
    char        *str;
    size_t       len;
    uint32_t    *ranges;
    int          n_ranges;
} ast;

typedef struct {
    char   *name;
    ast    *body;       /* NULL: referenced but never defined */
    size_t  where;      /* byte offset of its first reference or definition, for errors */
} ast_rule;

typedef struct {
    ast_rule *rules;
    int       n_rules, cap_rules;
    int       root;
} ast_grammar;

ast *ast_new(ast_kind kind);
int ast_add(ast *parent, ast *kid);
void ast_free(ast *a);
void ast_grammar_free(ast_grammar *g);
int ast_rule_id(ast_grammar *g, const char *name, size_t len, size_t where);

int gbnf_parse(const char *text, size_t len, ast_grammar *out, srt_err *err);

/* ---- byte automaton ---- */

enum { ST_BYTE, ST_SPLIT, ST_CALL, ST_FINAL };

typedef struct {
    uint8_t  kind;
    int32_t  a;         /* BYTE: next; SPLIT: first; CALL: rule */
    int32_t  b;         /* SPLIT: second (-1: a jump); CALL: the state to return to */
    int32_t  set;       /* BYTE: index of its 256-bit byte set */
} nfa_state;

/* What a state's epsilon closure holds: BYTE and CALL states, and whether the rule's end is
 * reachable (CLO_FINAL). */
#define CLO_FINAL (-1)

/* One BYTE state's token cache: tokens decided without looking below the state's frame. */
typedef struct {
    uint32_t *acc_bits;  /* accepted, as a mask (dense) ... */
    int32_t  *acc;       /* ... or as a list (sparse) */
    int32_t   n_acc;
    int32_t  *unc;       /* accepted or not depending on the frames below: checked per step */
    int32_t   n_unc;
} state_cache;

struct srt_grammar_vocab {
    size_t     n_ids;
    size_t     words;
    uint8_t  **bytes;       /* per id, NULL if never allowed */
    uint32_t  *lens;
    int32_t   *stop;
    size_t     n_stop;
    /* the byte trie over allowed tokens, in preorder */
    size_t     n_nodes;
    uint8_t   *t_byte;
    int32_t   *t_end;       /* first node after this one's subtree */
    int32_t   *t_tok_begin; /* its tokens: sorted[t_tok_begin .. t_tok_end) */
    int32_t   *t_tok_end;
    int32_t   *t_n_term;    /* of which the first t_n_term end exactly here */
    int32_t   *sorted;      /* token ids in byte order */
    size_t     n_sorted;
    uint32_t   max_len;
};

struct srt_grammar {
    int                       refs;
    pthread_mutex_t           lock;
    const srt_grammar_vocab  *vocab;
    nfa_state                *st;
    int32_t                   n_st, cap_st;
    uint64_t                 *sets;      /* 4 words per byte set */
    int32_t                   n_sets, cap_sets;
    int32_t                  *rule_start;
    int32_t                   n_rules;
    int32_t                   root_start;
    int32_t                  *clo_off;   /* closure of state s: clo[clo_off[s] .. clo_off[s+1]) */
    int32_t                  *clo;
    uint8_t                  *tail;      /* returning to this state only returns again */
    uint8_t                  *simple;    /* its closure holds BYTE states only (no call, no end):
                                            a step into it needs no work list (pda.c) */
    state_cache             **cache;     /* per state and frame kind (2 s + below-is-root), filled
                                            on first use */
    int32_t                  *rep;       /* per state, the state whose token cache it shares
                                            (equiv.c); NULL until first needed, or if that failed */
    int                       rep_tried;
    int32_t                  *owner;     /* per state, the rule whose frame it runs on (-1: not
                                            one rule); NULL with follow */
    uint64_t                 *follow;    /* per rule, 4 words: the bytes that can come right after
                                            it returns (a superset); NULL: not known */
    int32_t                   root_end;  /* states below it were built for the root rule */
    int                       root_called;  /* some rule calls the root rule */
};

int nfa_compile(ast_grammar *ag, srt_grammar *g, srt_err *err);

/* Interned vectors of 64-bit words (equiv.c): equal vectors get equal ids, 0, 1, 2, ... */
typedef struct {
    uint64_t  *pool;
    size_t     n_pool, cap_pool;
    uint32_t  *off, *len;   /* per id: its words, pool[off .. off + len) */
    uint64_t  *hash;
    int32_t    n_ids, cap_ids;
    int32_t   *slots;
    uint32_t   mask;
} vtab;

int vtab_init(vtab *t, int32_t hint);      /* -1: out of memory */
void vtab_free(vtab *t);
void vtab_reset(vtab *t);                  /* forget every vector, keep the memory */
int32_t vtab_intern(vtab *t, const uint64_t *v, uint32_t n);  /* -1: out of memory */

/* Fills g->owner and g->follow (equiv.c); -1 when out of memory (they stay NULL). */
int grammar_follow(srt_grammar *g);
/* *rep (malloc'd, the caller's): per state, the first state of its class of BYTE states that
 * behave the same on every byte string of at most depth bytes (itself for other states) */
int grammar_equiv(srt_grammar *g, uint32_t depth, int32_t **rep);

static inline int byteset_has(const srt_grammar *g, int32_t set, unsigned c)
{
    return (int) ((g->sets[set * 4 + (c >> 6)] >> (c & 63)) & 1);
}

/* ---- stacks: hash-consed (state, parent) frames ---- */

#define NODE_ROOT 0     /* below the root rule: popping into it means the grammar can end */
#define NODE_SENT 1     /* an unknown frame (cache computation): popping into it is "uncertain" */

typedef struct {
    int32_t   *state;
    int32_t   *parent;
    int32_t    n, cap;
    int32_t   *slots;       /* open addressing, -1 empty */
    uint32_t   mask;
    int32_t   *log;         /* slots filled, in order, to undo past a mark */
    int32_t   *direct[2];   /* per state, its node over NODE_ROOT / NODE_SENT (-1: none yet): the
                               frames mask walks create most, found without hashing */
} node_table;

typedef struct {
    int32_t  *tops;         /* node ids whose state is a BYTE state */
    int32_t   n, cap;
    int       accept;       /* the root rule can end here */
    int       uncertain;    /* some path popped into NODE_SENT */
} thread_set;

typedef struct {
    uint64_t  *keys;
    uint32_t  *gen;
    uint32_t   mask, cur;
    uint32_t   used, cap_used;
} visit_set;

typedef struct {
    const srt_grammar *g;
    node_table         nt;
    visit_set          vs;
    int                overflow; /* too many frames: treated as a dead end */
} pda;

int pda_init(pda *p, const srt_grammar *g);
void pda_free(pda *p);
int32_t pda_node(pda *p, int32_t state, int32_t parent);
void pda_truncate(pda *p, int32_t n);
void pda_start(pda *p, int32_t state, int32_t parent, thread_set *out);
void pda_advance(pda *p, const thread_set *in, unsigned byte, thread_set *out);
int ts_reserve(thread_set *s, int32_t n);
void pda_thread_done(void);
void ts_free(thread_set *s);

const state_cache *grammar_state_cache(srt_grammar *g, int32_t state, int root);
void state_cache_free(state_cache *sc);     /* accepts NULL */
int grammar_finish(srt_grammar *g, const srt_grammar_vocab *v, ast_grammar *ag, srt_grammar **out,
                   srt_err *err);

/* ---- growable strings (frontends) ---- */

typedef struct {
    char   *p;
    size_t  len, cap;
    int     oom;
} sbuf;

void sb_put(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_putc(sbuf *b, char c);

#endif
