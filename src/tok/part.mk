# Tokenizers (byte-level BPE and SentencePiece-style BPE from tokenizer.json or GGUF), detokenizer.
ENGINE_SRCS += src/tok/tok_text.c src/tok/tokenizer.c src/tok/bpe.c src/tok/detok.c src/tok/nfc.c \
               src/tok/load_json.c src/tok/load_gguf.c
