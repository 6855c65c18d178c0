# Chat templates: Jinja-subset interpreter (compile at model load, render per request).
ENGINE_SRCS += src/template/value.c src/template/utf8.c src/template/pyfmt.c src/template/compile.c \
               src/template/render.c src/template/builtins.c src/template/context.c \
               src/template/ucase.c
