#!/usr/bin/env bash
# Install everything ngx_srt needs to build and test, then fetch/generate the test models.
#
# Idempotent and quick when all is present: every apt package is checked with dpkg and every
# Python module with an import before anything is installed; `apt-get update` only runs when
# a package is missing. Target: Debian 12 (bookworm), as root or through sudo.
#
# Python: packages go into the interpreter that runs the tests, `python3` on PATH (override
# with PYTHON=/path/to/python, e.g. a virtualenv's). If that interpreter is "externally
# managed" (PEP 668, Debian's /usr/bin/python3), they are installed with
# `pip install --user --break-system-packages`: into ~/.local, which python3 searches by
# default, leaving every apt-owned file untouched. Set SRT_PIP_USER=0 to install system-wide
# instead, or point PYTHON at a venv to keep the user site clean.
#
# torch/transformers are NOT installed: only scripts/make_golden.py needs them and the golden
# fixtures it writes are committed. llama-cpp-python (benchmarks) is in install-bench-deps.sh.
#
#   SRT_MODEL_DIR        model cache (default <repo>/.cache/models)
#   SRT_SKIP_MODELS=1    do not fetch/generate models
#
# passwd (useradd) and acl (setfacl) are for scripts/srt-user.sh: as root, the nginx workers
# and the scheduler of `make run` / `make test` run as the system user ngx-srt. procps: ps,
# which the suites use to find nginx's processes (a minimal Debian has none).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}

APT_PACKAGES=(
    build-essential pkg-config
    nginx nginx-dev libyajl-dev libpcre2-dev
    perl libtest-base-perl libtext-diff-perl liblist-moreutils-perl libtest-longstring-perl
    libhttp-message-perl libipc-run-perl liburi-perl libwww-perl
    valgrind ca-certificates
    passwd acl procps
    clang libclang-rt-14-dev
    python3 python3-pip python3-venv
)
# module name -> pip requirement
# (pydantic, which t/lib/structured_e2e.py uses too, comes with openai)
PY_MODULES=(numpy safetensors tokenizers jinja2 openai gguf jsonschema)
declare -A PIP_NAME=([numpy]=numpy [safetensors]=safetensors [tokenizers]=tokenizers
                     [jinja2]=jinja2 [openai]=openai [gguf]=gguf [jsonschema]=jsonschema)

log() { echo "install-deps: $*"; }

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "install-deps: need root (or sudo) to run: $*" >&2
        exit 1
    fi
}

# ---------------------------------------------------------------- apt
# One dpkg-query for all packages; anything not reported as installed is missing.
# dpkg-query exits 1 when any package is unknown to dpkg (every one, on a fresh root):
# that is an answer here, not an error, so its status is dropped before pipefail sees it.
installed=" $({ dpkg-query -W -f='${Package} ${Status}\n' "${APT_PACKAGES[@]}" 2>/dev/null || true; } |
              awk '$4 == "installed" { printf "%s ", $1 }')"
missing=()
for p in "${APT_PACKAGES[@]}"; do
    case "$installed" in *" $p "*) ;; *) missing+=("$p") ;; esac
done
if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-deps: missing ${missing[*]} and no apt-get (not Debian?); install them by hand" >&2
        exit 1
    fi
    log "apt: installing ${missing[*]}"
    # apt's own output says more; the last line says what failed, in one line
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q ||
        { echo "install-deps: apt-get update failed: no network to the Debian mirror, or a broken sources.list?" >&2; exit 1; }
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
        { echo "install-deps: apt-get install of ${missing[*]} failed (not in this Debian's archive, or no network); nothing of ours was installed" >&2; exit 1; }
else
    log "apt: all ${#APT_PACKAGES[@]} packages present"
fi

# ---------------------------------------------------------------- python
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "install-deps: no $PYTHON on PATH" >&2
    exit 1
fi
# One interpreter start, find_spec instead of import: a second, not ~10 under load.
py_missing=()
for m in $("$PYTHON" -c 'import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))' "${PY_MODULES[@]}"); do
    py_missing+=("${PIP_NAME[$m]}")
done
if [ ${#py_missing[@]} -gt 0 ]; then
    if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
        echo "install-deps: $PYTHON has no pip (apt package python3-pip, or ensurepip)" >&2
        exit 1
    fi
    pip_args=(install -q --disable-pip-version-check --no-warn-script-location --root-user-action=ignore)
    managed=$("$PYTHON" -c 'import os, sysconfig
print(int(os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))')
    in_venv=$("$PYTHON" -c 'import sys; print(int(sys.prefix != sys.base_prefix))')
    if [ "$managed" = 1 ] && [ "$in_venv" = 0 ]; then
        # PEP 668 interpreter: keep apt's files intact, install beside them.
        pip_args+=(--break-system-packages)
        pip_target="$PYTHON (externally managed: --break-system-packages"
        if [ "${SRT_PIP_USER:-1}" = 1 ]; then
            pip_args+=(--user)
            pip_target+=" --user"
        fi
        pip_target+=")"
    else
        pip_target="$PYTHON"
    fi
    log "pip: installing ${py_missing[*]} into $pip_target"
    "$PYTHON" -m pip "${pip_args[@]}" "${py_missing[@]}" ||
        { echo "install-deps: pip install ${py_missing[*]} failed (no network to PyPI?)" >&2; exit 1; }
    if ! "$PYTHON" -c "import $(IFS=,; echo "${PY_MODULES[*]}")"; then
        echo "install-deps: python modules still not importable after pip install" >&2
        exit 1
    fi
else
    log "python: ${PY_MODULES[*]} importable by $PYTHON"
fi

# ---------------------------------------------------------------- models
if [ "${SRT_SKIP_MODELS:-0}" != 1 ]; then
    PYTHON="$PYTHON" scripts/fetch-model.sh
    "$PYTHON" scripts/make_tiny_models.py
fi
log "done"
