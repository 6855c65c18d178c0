# Scheduler: continuous batching core, the scheduler process (serve), metrics, TP group.
ENGINE_SRCS += src/sched/sched.c src/sched/serve.c src/sched/metrics.c src/sched/tp_group.c \
               src/sched/grammar_cache.c
