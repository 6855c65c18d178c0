/* Internal types of the chat-template interpreter: arena, values, syntax tree, render state. */
#ifndef SRT_TPL_H
#define SRT_TPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "srt/common.h"

/* ---- arena: everything a compile or a render allocates lives here and dies with it ---- */
typedef struct tpl_chunk tpl_chunk;
typedef struct tpl_arena {
    tpl_chunk *head;
    size_t     used_total;
    size_t     limit;        /* 0: unlimited; a render fails cleanly past it */
    bool       exhausted;
} tpl_arena;

void  tpl_arena_init(tpl_arena *a, size_t limit);
void  tpl_arena_free(tpl_arena *a);
void *tpl_arena_alloc(tpl_arena *a, size_t n);                 /* 16-aligned, NULL when exhausted */
char *tpl_arena_memdup(tpl_arena *a, const char *s, size_t n); /* adds a NUL */

/* ---- values (Python objects as jinja2 sees them) ---- */
typedef enum vtype {
    V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_MACRO, V_FUNC, V_LOOP,
    V_BIGINT /* an integer beyond int64 from the JSON context, kept as its decimal text */
} vtype;

typedef struct vlist vlist;
typedef struct vdict vdict;
typedef struct tpl_macro tpl_macro;
typedef struct tpl_loop tpl_loop;

typedef struct val {
    uint8_t t;
    uint8_t tuple;   /* V_LIST as Python would hold it: a list (0), a tuple (1), or a dict view (VIEW_*) */
    uint8_t fn;      /* V_FUNC: which global */
    union {
        int64_t i;                            /* V_INT, V_BOOL */
        double  f;                            /* V_FLOAT */
        struct { const char *p; size_t n; } s; /* V_STR, V_BIGINT; V_UNDEF: the name, for messages */
        vlist     *l;
        vdict     *d;                         /* V_DICT, V_NS (a namespace is a mutable dict) */
        tpl_macro *m;
        tpl_loop  *loop;
    } u;
} val;

struct vlist { size_t n, cap; val *v; };
/* Insertion-ordered like a Python dict. Past DICT_INDEX_MIN keys, tpl_dict_set keeps a hash index so
 * lookups in request-sized objects stay O(1); idx_n says how many entries the index covers (entries
 * written directly into k/v leave it stale, and lookups then fall back to a scan). */
#define DICT_INDEX_MIN 16
struct vdict { size_t n, cap; val *k; val *v; uint32_t *idx; size_t idx_cap, idx_n; };

enum { VIEW_ITEMS = 2, VIEW_KEYS, VIEW_VALUES }; /* d.items(), d.keys(), d.values() */

enum { FN_RANGE = 1, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME };

static inline val v_undef(void) { val v = {0}; v.t = V_UNDEF; return v; }
static inline val v_none(void) { val v = {0}; v.t = V_NONE; return v; }
static inline val v_bool(bool b) { val v = {0}; v.t = V_BOOL; v.u.i = b; return v; }
static inline val v_int(int64_t i) { val v = {0}; v.t = V_INT; v.u.i = i; return v; }
static inline val v_float(double f) { val v = {0}; v.t = V_FLOAT; v.u.f = f; return v; }
static inline val v_str(const char *p, size_t n) { val v = {0}; v.t = V_STR; v.u.s.p = p; v.u.s.n = n; return v; }

vlist *tpl_list_new(tpl_arena *a, size_t cap);
int    tpl_list_push(tpl_arena *a, vlist *l, val v);
vdict *tpl_dict_new(tpl_arena *a, size_t cap);
int    tpl_dict_set(tpl_arena *a, vdict *d, val k, val v);   /* replaces an equal key */
val   *tpl_dict_get(const vdict *d, const char *key, size_t n); /* string keys; NULL if absent */
val   *tpl_dict_get_val(const vdict *d, val key);
bool   tpl_hashable(val v);
uint64_t tpl_hash(val v);                               /* equal for values Python deems equal */

/* ---- growable string buffer in an arena ---- */
typedef struct sbuf { char *p; size_t n, cap; tpl_arena *a; bool oom; } sbuf;
void tpl_sb_init(sbuf *b, tpl_arena *a, size_t cap);
void tpl_sb_put(sbuf *b, const char *s, size_t n);
void tpl_sb_putc(sbuf *b, char c);
void tpl_sb_puts(sbuf *b, const char *s);
void tpl_sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- Python text forms (pyfmt.c) ---- */
const char *tpl_py_type_name(val v);
void tpl_py_float_repr(sbuf *b, double f);
void tpl_py_str(sbuf *b, val v);          /* str(v); undefined prints nothing */
void tpl_py_repr(sbuf *b, val v);         /* repr(v) */
void tpl_py_repr_str(sbuf *b, const char *s, size_t n);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys); indent NULL: no newlines. */
int  tpl_py_json(sbuf *b, val v, bool ensure_ascii, const char *indent, size_t indent_len, bool use_indent,
             const char *item_sep, const char *key_sep, bool sort_keys, int depth, srt_err *err);

/* ---- UTF-8 helpers (utf8.c) ---- */
size_t   tpl_u8_len(const char *s, size_t n);                         /* code points */
size_t   tpl_u8_offset(const char *s, size_t n, size_t cp);           /* byte offset of code point cp */
uint32_t tpl_u8_decode(const char *s, size_t n, size_t *adv);
bool     tpl_u8_is_ascii(const char *s, size_t n);
bool     tpl_py_isspace_cp(uint32_t c);
size_t   tpl_u8_space_at(const char *s, size_t n);          /* bytes of a whitespace char at s, else 0 */
size_t   tpl_u8_space_before(const char *s, size_t n);      /* bytes of a whitespace char ending at s+n, else 0 */

/* ---- Python's case methods, full Unicode case mapping (ucase.c) ---- */
enum { TPL_CASE_UPPER, TPL_CASE_LOWER, TPL_CASE_TITLE, TPL_CASE_CAPITALIZE, TPL_CASE_JINJA_TITLE };
#define TPL_CASE_MAX_GROWTH 3   /* out of tpl_case_map needs at most 3 * n bytes */
size_t   tpl_case_map(const char *s, size_t n, int mode, char *out);   /* returns bytes written */
bool     tpl_case_is(const char *s, size_t n, bool upper);            /* str.isupper() / islower() */
bool     tpl_cp_cased(uint32_t c);                                     /* Unicode Cased, as Python */
bool     tpl_cp_printable(uint32_t c);                                 /* str.isprintable() (repr escapes the rest) */
bool     tpl_cp_alpha(uint32_t c);                                     /* str.isalpha() */
bool     tpl_cp_digit(uint32_t c);                                     /* str.isdigit() */
bool     tpl_cp_alnum(uint32_t c);                                     /* str.isalnum() (re's \w less "_") */

/* ---- syntax tree ---- */
typedef enum ekind {
    E_CONST, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_METHOD, E_FILTER, E_TEST,
    E_NEG, E_POS, E_NOT, E_AND, E_OR, E_BIN, E_CMP, E_COND, E_PLACEHOLDER
} ekind;

enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

typedef struct expr expr;
struct expr {
    uint8_t     kind;
    uint8_t     op;        /* E_BIN operator; E_TEST: negated */
    int         id;        /* filter, test, method or function id */
    int         line;
    val         lit;       /* E_CONST */
    const char *name;      /* E_NAME, E_ATTR, E_METHOD, E_FILTER, E_TEST, E_CALL */
    size_t      name_len;
    expr       *a, *b, *c;
    expr      **args;      /* call arguments, list items, dict keys/values interleaved, E_CMP operands */
    const char **kw;       /* keyword name per argument, NULL for positional */
    size_t     *kwlen;
    uint8_t    *ops;       /* E_CMP operators */
    int         nargs;
};

typedef enum skind {
    S_TEXT, S_OUTPUT, S_IF, S_FOR, S_SET, S_SET_ATTR, S_SET_BLOCK, S_MACRO, S_CALL_BLOCK, S_FILTER_BLOCK,
    S_WITH, S_BREAK, S_CONTINUE, S_BODY
} skind;

typedef struct stmt stmt;
typedef struct name_ref { const char *p; size_t n; } name_ref;

struct stmt {
    uint8_t     kind;
    int         line;
    stmt       *next;
    const char *text;      /* S_TEXT */
    size_t      text_len;
    expr       *e;         /* S_OUTPUT, S_IF cond, S_FOR iterable, S_SET value, S_CALL_BLOCK call */
    expr       *cond;      /* S_FOR filter; S_SET_BLOCK and S_FILTER_BLOCK: filter chain on E_PLACEHOLDER */
    stmt       *body, *else_body;
    name_ref   *targets;   /* S_FOR, S_SET, S_WITH names; S_SET_ATTR: object, attribute; S_MACRO params */
    int         ntargets;
    bool        unpack;    /* targets were written as a tuple */
    expr      **defaults;  /* S_MACRO parameter defaults (NULL entries: required); S_WITH values */
    name_ref    name;      /* S_MACRO name */
};

struct tpl_macro {
    const stmt *def;       /* S_MACRO, or S_CALL_BLOCK for `caller` */
    struct frame *closure;
    val caller;            /* the caller macro visible inside, or undefined */
};

typedef struct frame {
    struct frame *parent;
    struct var { const char *p; size_t n; val v; } *vars;
    size_t n, cap;
} frame;

struct tpl_loop { vlist *items; size_t index0; };

/* ---- compiled template ---- */
struct srt_chat_template {
    tpl_arena arena;
    stmt     *root;
};

/* ---- builtins (builtins.c) ---- */
typedef struct cargs {
    val *pos; int npos;
    const char **kw; size_t *kwlen; val *kwv; int nkw;
} cargs;

int tpl_filter_lookup(const char *name, size_t n);   /* 0: unknown */
int tpl_test_lookup(const char *name, size_t n);
int tpl_method_lookup(const char *name, size_t n);
int tpl_function_lookup(const char *name, size_t n);

typedef struct render render;
int tpl_filter_apply(render *r, int id, val in, cargs *a, val *out);
int tpl_test_apply(render *r, int id, val in, cargs *a, bool *out);
int tpl_method_apply(render *r, int id, val self, cargs *a, val *out, bool *found);
int tpl_function_apply(render *r, int fn, cargs *a, val *out);

/* ---- render state and core semantics shared by render.c and builtins.c ---- */
struct render {
    tpl_arena   a;
    srt_err    *err;
    vdict      *ctx;
    int64_t     now;
    bool        now_fixed;
    val         placeholder;
    int         depth;
};

int  tpl_rerr(render *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool tpl_truthy(val v);
bool tpl_val_eq(val a, val b);
int  tpl_val_cmp(render *r, val a, val b, int *out);      /* <0, 0, >0; TypeError for unordered types */
int  tpl_val_len(render *r, val v, int64_t *out);
int  tpl_val_iter(render *r, val v, vlist **out);         /* list, dict keys, string chars, undefined: empty */
int  tpl_val_getattr(render *r, val obj, const char *name, size_t n, val *out);
int  tpl_val_getitem(render *r, val obj, val key, val *out);
int  tpl_val_to_str(render *r, val v, val *out);          /* str(v) as a V_STR */
int  tpl_call_macro(render *r, val m, cargs *a, val *out);
int  tpl_binop(render *r, int op, val x, val y, val *out);
int  tpl_make_int(render *r, __int128 x, val *out);           /* int64 or, beyond it, a V_BIGINT */
int  tpl_get_arg(cargs *a, int pos, const char *name, val *out); /* 1 if present */

#endif
