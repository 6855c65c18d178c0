#!/usr/bin/env bash
# prove's --exec hook: .t files run under perl, compiled unit tests run as they are.
case "$1" in
    *.t) exec perl -I t/lib "$@" ;;
    *)   exec "$@" ;;
esac
