/* Radix (prefix) cache over KV slots, with SGLang's RadixCache semantics.
 *
 * A tree keyed by token ids: each node holds a run of tokens and the KV slots computed for
 * them. Children are told apart by their first token (first page when page_size > 1) and
 * keys are whole pages. match_prefix splits a node when a match ends inside it. Requests
 * lock the path to their last matched node (lock_ref, walked up to the root); unlocked
 * leaves are evicted least-recently-used first.
 *
 * Storage is fixed at init: a node's key is a chain through per-slot arrays (tok[slot],
 * next[slot]), since every cached token owns exactly one slot, and nodes come from a pool
 * of num_pages + 1 (each non-root node holds at least one page). Nothing allocates later.
 *
 * Namespaces: every key lives in a namespace (a 64-bit id; 0 is the shared one). The root's
 * children carry it and a match only enters children of its own namespace, so a prefix
 * computed under a tenant's cache_salt or a request's hook selection is never served to
 * another (the _ns functions; the others use namespace 0).
 *
 * Disabled (srt_radix_cache off): nothing is ever matched or kept; cache_finished frees a
 * request's whole KV, like SGLang's ChunkCache. */
#ifndef SRT_CACHE_RADIX_CACHE_H
#define SRT_CACHE_RADIX_CACHE_H

#include <stdint.h>

#include "cache/kv_alloc.h"
#include "srt/common.h"

#define SRT_RADIX_ROOT 0
#define SRT_RADIX_NONE (-1)

typedef struct srt_radix_node {
    int32_t  parent, first_child, next_sib, prev_sib;
    int32_t  first_slot;    /* head of this node's slot chain */
    int32_t  len;           /* tokens, a multiple of page_size */
    int32_t  lock_ref;
    int32_t  n_children;
    uint64_t last_access;
    int32_t  in_use;
    uint64_t ns;            /* children of the root: the namespace their subtree belongs to */
} srt_radix_node;

typedef struct srt_radix_cache {
    srt_kv_alloc   *kv;
    int             disabled;
    int32_t         page_size;
    int32_t         n_slots;
    int32_t        *tok;          /* token of each cached slot */
    int32_t        *next;         /* next slot in the same node's key */
    srt_radix_node *nodes;
    int32_t         cap_nodes;
    int32_t         n_free_nodes;
    int32_t        *free_nodes;
    int32_t        *heap;         /* eviction scratch */
    int64_t         evictable;    /* tokens in nodes with lock_ref == 0 */
    int64_t         protected_;   /* tokens in nodes with lock_ref > 0 */
    uint64_t        clock;
} srt_radix_cache;

int  srt_radix_init(srt_radix_cache *c, srt_kv_alloc *kv, int disabled, srt_err *err);
void srt_radix_destroy(srt_radix_cache *c);

/* Longest cached prefix of key[0..len), truncated to whole pages. Writes its slots to
 * out_slots (room for len; may be NULL) and the deepest matched node to *last_node (the
 * root when nothing matched). Splits the node the match ends in. Touches LRU times. */
int32_t srt_radix_match_prefix(srt_radix_cache *c, const int32_t *key, int32_t len,
                               int32_t *out_slots, int32_t *last_node);
int32_t srt_radix_match_prefix_ns(srt_radix_cache *c, uint64_t ns, const int32_t *key,
                                  int32_t len, int32_t *out_slots, int32_t *last_node);

/* Like match_prefix without side effects: no split, no LRU touch, no slots (for
 * scheduling policies that only rank requests). */
int32_t srt_radix_peek_prefix(const srt_radix_cache *c, const int32_t *key, int32_t len);
int32_t srt_radix_peek_prefix_ns(const srt_radix_cache *c, uint64_t ns, const int32_t *key,
                                 int32_t len);

/* Inserts key[0..len) (len truncated to whole pages) with its slots. Returns how many
 * leading tokens were already cached: their slots in `slots` are NOT taken by the tree
 * (the caller frees its duplicates); the rest now belong to the tree. */
int32_t srt_radix_insert(srt_radix_cache *c, const int32_t *key, const int32_t *slots, int32_t len);
int32_t srt_radix_insert_ns(srt_radix_cache *c, uint64_t ns, const int32_t *key,
                            const int32_t *slots, int32_t len);

/* Lock / unlock the path from node to the root. dec fails (changing nothing) if any
 * lock_ref on the path would go negative. */
void srt_radix_inc_lock(srt_radix_cache *c, int32_t node);
int  srt_radix_dec_lock(srt_radix_cache *c, int32_t node);

/* Frees unlocked leaves, LRU first, until num_tokens are freed or nothing is evictable.
 * Returns tokens freed. */
int64_t srt_radix_evict(srt_radix_cache *c, int64_t num_tokens);

static inline int64_t srt_radix_evictable_size(const srt_radix_cache *c) { return c->evictable; }
static inline int64_t srt_radix_protected_size(const srt_radix_cache *c) { return c->protected_; }
/* Recomputed by walking every node (for tests and checks). */
int64_t srt_radix_total_size(const srt_radix_cache *c);
/* Checks the tree's structural invariants; SRT_ERROR with a message on the first breach. */
int     srt_radix_check(const srt_radix_cache *c, srt_err *err);

/* A request's view of its KV: row is its req_to_token row; row[0..prefix_len) are tree
 * slots locked through last_node, the rest up to the request's KV length are its own. */
typedef struct srt_cache_req {
    int32_t *row;
    int32_t  prefix_len;
    int32_t  last_node;   /* SRT_RADIX_NONE when nothing is locked */
    uint64_t ns;          /* the namespace its prefixes are matched and cached in */
} srt_cache_req;

/* Starts a request: matches tokens[0..len-1) (one token is always left to compute, so the
 * request gets logits) into r->row and locks the match. Returns the matched length. */
int32_t srt_radix_match_req(srt_radix_cache *c, const int32_t *tokens, int32_t len,
                            srt_cache_req *r);

/* The request is done with kv_len tokens of KV (tokens[0..kv_len) computed): its prompt
 * and generated tokens go into the tree (whole pages), its duplicates and partial last
 * page are freed, its lock is dropped. Disabled: frees row[0..kv_len). */
int srt_radix_cache_finished(srt_radix_cache *c, const int32_t *tokens, int32_t kv_len,
                             srt_cache_req *r);

/* The request continues (after a prefill chunk): tokens[0..kv_len) go into the tree, the
 * request re-points its row at the tree's slots (freeing its duplicates) and moves its
 * lock to the new last node. Its partial last page stays its own. No-op when disabled. */
int srt_radix_cache_unfinished(srt_radix_cache *c, const int32_t *tokens, int32_t kv_len,
                               srt_cache_req *r);

#endif
