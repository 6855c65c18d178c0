# The model's front end (tokenizer, chat template, bos/eos), loaded one way for every caller.
ENGINE_SRCS += src/front/frontend.c
ENGINE_SRCS += src/front/output_parse.c
ENGINE_SRCS += src/front/tool_gbnf.c
