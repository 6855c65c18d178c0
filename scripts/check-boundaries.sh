#!/usr/bin/env bash
# The boundaries between the engine's parts, checked rather than hoped for (run by
# scripts/run-tests.sh, so by `make test` and CI).
#
#  1. Public headers (src/include) include only public headers and the C library.
#  2. A header under src/PART/ is PART's own. Another folder may include it only where the
#     table below names it as PART's interface to that folder. Tests (t/) are white-box and
#     may include anything.
#  3. The nginx module exports nginx's three module symbols and the engine's SRT_API
#     declarations, nothing else (libsrt is built -fvisibility=hidden; nginx loads modules
#     RTLD_GLOBAL, so an exported internal is lent to every other module).
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
MODULE=${MODULE:-$BUILD/nginx/ngx_http_srt_module.so}
fail=0
bad() { echo "check-boundaries: $*" >&2; fail=1; }

# header (relative to src/)    folders that may include it (besides its own)
interfaces='
ipc/channel.h              src/ngx src/sched src/hooks src/cli
sched/serve.h              src/ngx src/cli
sched/tp_group.h           src/cli
hooks/registry.h           src/ngx src/sched src/cli
hooks/admin.h              src/sched
hooks/activations.h        src/sched
cache/kv_alloc.h           src/sched
cache/radix_cache.h        src/sched
model/gguf.h               src/tok src/hooks
backend/cpu/cpu_kernels.h  src/model src/backend/cuda src/cli
backend/cpu/cpu_exact.h    src/cli
'

allowed() {   # allowed HEADER FOLDER
    local h=$1 d=$2 line
    line=$(printf '%s\n' "$interfaces" | awk -v h="$h" '$1 == h')
    [ -n "$line" ] || return 1
    for f in ${line#* }; do [ "$f" = "$d" ] && return 0; done
    return 1
}

# 1 and 2: every quoted include in src/
while IFS=: read -r file _ inc; do
    inc=${inc#*\"}; inc=${inc%%\"*}
    dir=$(dirname "$file")
    case $file in
    src/include/*)
        case $inc in
        srt/*|srt_hooks.h) ;;
        *) bad "$file includes \"$inc\": a public header includes only public headers" ;;
        esac
        continue ;;
    esac
    case $inc in
    srt/*|srt_hooks.h) continue ;;           # public
    */*) ;;                                  # PART/header.h
    *) continue ;;                           # same folder, by name
    esac
    [ -e "src/$inc" ] || continue            # not ours (e.g. nginx's, CUDA's)
    [ "src/$(dirname "$inc")" = "$dir" ] && continue
    allowed "$inc" "$dir" ||
        bad "$file includes \"$inc\", private to src/$(dirname "$inc") (scripts/check-boundaries.sh lists the interfaces)"
done < <(git ls-files --cached --others --exclude-standard 'src/*.c' 'src/*.h' |
         while read -r f; do [ -e "$f" ] && echo "$f"; done |
         xargs grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"')

# 3: the module's dynamic symbols
if [ -e "$MODULE" ]; then
    api=$(cat src/include/srt/*.h | tr '\n' ' ' | grep -oE 'SRT_API [^;]*[;{]' |
          grep -oE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*[([]' | sed -E 's/[[:space:]]*[([]$//' |
          awk '!/^(SRT_API|__attribute__|format|printf|visibility)$/' | sort -u)
    api=$(printf '%s\n' "$api" ngx_modules ngx_module_names ngx_module_order | sort -u)
    extra=$(nm -D --defined-only "$MODULE" | awk '{print $NF}' | sort -u | comm -23 - <(printf '%s\n' "$api"))
    if [ -n "$extra" ]; then
        bad "$MODULE exports symbols that no public header declares SRT_API:"
        printf '    %s\n' $extra >&2
    fi
elif [ -e /usr/share/nginx/src/configure ]; then
    bad "$MODULE is missing (run make first)"
else
    echo "check-boundaries: no nginx-dev here, the module's symbol check is skipped" >&2
fi

[ $fail = 0 ] && echo "check-boundaries: ok"
exit $fail
