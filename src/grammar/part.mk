# Grammar-constrained decoding: GBNF / regex / JSON Schema -> byte pushdown automaton, token masks.
ENGINE_SRCS += src/grammar/gbnf.c src/grammar/regex.c src/grammar/json_schema.c src/grammar/nfa.c \
               src/grammar/pda.c src/grammar/mask.c src/grammar/matcher.c \
               src/grammar/equiv.c
