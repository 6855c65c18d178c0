#ifndef SRT_MODEL_CONFIG_H
#define SRT_MODEL_CONFIG_H

#include "srt/model.h"

struct srt_gguf;
int srt_config_from_json(const char *dir, srt_model_config *c, srt_err *err);
int srt_config_from_gguf(const struct srt_gguf *g, const char *path, srt_model_config *c, srt_err *err);
/* Fills defaults (kv heads, head_dim) and rejects inconsistent values. */
int srt_config_check(srt_model_config *c, const char *path, srt_err *err);

#endif
