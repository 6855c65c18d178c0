/* Tokenizers: byte-level BPE (GPT-2, Llama-3, Qwen2, SmolLM2) and SentencePiece-style BPE with byte
 * fallback (Llama-2, Mistral), loaded from HF tokenizer.json or from GGUF metadata, giving the same ids
 * as HF `tokenizers`.
 *
 * A loaded srt_tokenizer is immutable and may be used by several threads at once: every call keeps its
 * scratch on its own (the word cache inside is guarded by a try-lock, so no caller ever waits on it). */
#ifndef SRT_TOKENIZER_H
#define SRT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "srt/common.h"

typedef struct srt_tokenizer srt_tokenizer;

/* Encode flags. */
#define SRT_TOK_PARSE_SPECIAL 0x1u /* recognise special added tokens ("<|im_start|>") in the text;
                                      without it they are encoded as plain text. Non-special added tokens
                                      are always recognised, as HF does. */
#define SRT_TOK_ADD_SPECIAL   0x2u /* apply the post-processor (e.g. Llama's BOS), = HF add_special_tokens */

/* Decode / detokenizer flags. */
#define SRT_DETOK_SKIP_SPECIAL 0x1u /* drop special tokens, = HF skip_special_tokens */

/* tokenizer_config_json may be NULL; when given, bos/eos/pad/unk token strings, add_bos_token and
 * chat_template are read from it. Errors name the file and the field. */
SRT_API int srt_tokenizer_load_json(const char *tokenizer_json_path, const char *tokenizer_config_json_path,
                                    srt_tokenizer **out, srt_err *err);
/* The same from memory; `name` is used in error messages. config may be NULL. */
SRT_API int srt_tokenizer_load_json_mem(const char *json, size_t len, const char *config_json, size_t config_len,
                                        const char *name, srt_tokenizer **out, srt_err *err);
/* From the tokenizer.* keys of a GGUF file (tokenizer.ggml.model gpt2 or llama). */
SRT_API int srt_tokenizer_from_gguf(const char *gguf_path, srt_tokenizer **out, srt_err *err);
/* The tokenizer of a model path as the server serves it: a directory's tokenizer.json, with its
 * tokenizer_config.json when that is readable, else a GGUF file's own. config_path (cap bytes; may be
 * NULL) receives the tokenizer_config.json read, "" when none. */
SRT_API int srt_tokenizer_load_model(const char *model_path, char *config_path, size_t cap, srt_tokenizer **out,
                                     srt_err *err);
SRT_API void srt_tokenizer_free(srt_tokenizer *tok);

/* Encodes text[0..len) (must be valid UTF-8). Writes up to cap ids; *n_out is always the full count.
 * Returns SRT_ERROR (with *n_out set to the count needed) when cap is too small. */
SRT_API int srt_tokenizer_encode(const srt_tokenizer *tok, const char *text, size_t len, unsigned flags,
                                 int32_t *ids, size_t cap, size_t *n_out, srt_err *err);
/* Same, into a malloc'ed array the caller frees. */
SRT_API int srt_tokenizer_encode_alloc(const srt_tokenizer *tok, const char *text, size_t len, unsigned flags,
                                       int32_t **ids, size_t *n_out, srt_err *err);

/* Full decode, = HF decode(ids, skip_special_tokens). *text is malloc'ed and NUL-terminated. */
SRT_API int srt_tokenizer_decode(const srt_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                                 char **text, size_t *len, srt_err *err);

/* Vocabulary. Ids run from 0 to srt_tokenizer_vocab_size()-1 (model vocab and added tokens). */
SRT_API size_t srt_tokenizer_vocab_size(const srt_tokenizer *tok);
/* The token's string as the vocab spells it ("Ġhello", "▁the", "<|im_end|>"); NULL for unknown ids. */
SRT_API const char *srt_tokenizer_token_str(const srt_tokenizer *tok, int32_t id, size_t *len);
/* The bytes this token decodes to on its own ("Ġhello" -> " hello", "<0x41>" -> "A"); may be part of
 * a UTF-8 character. For logprob "bytes" fields and stop-string checks. NULL for unknown ids. */
SRT_API const char *srt_tokenizer_token_bytes(const srt_tokenizer *tok, int32_t id, size_t *len);
/* The id of an exact vocab or added-token string, or -1. */
SRT_API int32_t srt_tokenizer_token_id(const srt_tokenizer *tok, const char *s, size_t len);
SRT_API int srt_tokenizer_is_special(const srt_tokenizer *tok, int32_t id);

/* Special tokens: ids are -1 and strings NULL when the tokenizer has none. Strings come from
 * tokenizer_config.json (or GGUF ids), else from the vocab for ids known another way. */
SRT_API int32_t srt_tokenizer_bos_id(const srt_tokenizer *tok);
SRT_API int32_t srt_tokenizer_eos_id(const srt_tokenizer *tok);
SRT_API int32_t srt_tokenizer_pad_id(const srt_tokenizer *tok);
SRT_API const char *srt_tokenizer_bos_token(const srt_tokenizer *tok);
SRT_API const char *srt_tokenizer_eos_token(const srt_tokenizer *tok);
/* Whether SRT_TOK_ADD_SPECIAL adds a BOS (tokenizer_config add_bos_token / post-processor / GGUF). */
SRT_API int srt_tokenizer_adds_bos(const srt_tokenizer *tok);
/* chat_template from tokenizer_config.json (the "default" one when it is a list) or GGUF
 * tokenizer.chat_template; NULL when absent. Owned by the tokenizer. */
SRT_API const char *srt_tokenizer_chat_template(const srt_tokenizer *tok);

/* Streaming detokenizer: fed one id at a time, it returns the text that became complete. It never
 * emits half a UTF-8 character, holds byte-fallback runs until they resolve, and the concatenation of
 * all pushes and the final flush equals srt_tokenizer_decode() of the same ids.
 * No allocation: the caller provides an output buffer of at least srt_detok_max_out(tok) bytes. */
typedef struct srt_detok {
    const srt_tokenizer *tok;
    unsigned flags;
    uint32_t n_tokens;     /* tokens decoded so far (after skipping) */
    uint32_t strip_left;   /* leading characters still to strip (decoder Strip) */
    uint32_t n_pending;    /* held bytes */
    int pending_is_group;  /* held bytes are a byte-fallback run, not a partial UTF-8 character */
    uint8_t pending[64];
} srt_detok;

SRT_API void srt_detok_init(srt_detok *d, const srt_tokenizer *tok, unsigned flags);
SRT_API size_t srt_detok_max_out(const srt_tokenizer *tok);
/* Appends the newly completed text to out (not NUL-terminated) and sets *n to its length. An id with no
 * token (outside the vocab, or a hole in it) adds nothing, as in HF's decode. */
SRT_API int srt_detok_push(srt_detok *d, int32_t id, char *out, size_t cap, size_t *n, srt_err *err);
/* End of stream: emits what is still held (an incomplete character becomes U+FFFD, as HF does). */
SRT_API int srt_detok_flush(srt_detok *d, char *out, size_t cap, size_t *n, srt_err *err);

#endif
