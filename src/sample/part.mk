# Sampling: logits processing, per-request sampler state, seeded RNG, logprobs.
ENGINE_SRCS += src/sample/sampling.c
