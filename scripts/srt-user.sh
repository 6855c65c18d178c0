#!/usr/bin/env bash
# Which user the nginx workers and the scheduler run as under `make run` / `make test`, and
# make sure that user can read what they need.
#
#   scripts/srt-user.sh PATH...      prints the user name; exits 1 with one line if it cannot be arranged
#
# nginx started by an ordinary user keeps that user for every process (the `user` directive
# only applies to a root master): nothing to arrange, the user is printed.
#
# nginx started as root: the workers and the scheduler never run as root. They run as the
# system user `ngx-srt` (no login, no home, created here once), a user of their own rather
# than nobody or www-data, so that whatever it is granted is granted to this server alone.
# A clone is often where that user cannot reach it: /root is 0700 on a fresh Debian. Rather
# than move the models, build and t/servroot out of the clone, or open /root to everyone,
# each directory above PATH that the user cannot enter gets one POSIX ACL entry
# `u:ngx-srt:--x` (it may pass through, not list), and a PATH it still cannot read gets
# `u:ngx-srt:rX` on its tree, with a default entry so that files made later inherit it.
# Everything is checked afterwards as that user (runuser), never assumed.
#
#   SRT_USER   run as this existing user instead of ngx-srt (root only)
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    id -un
    exit 0
fi

user=${SRT_USER:-ngx-srt}
die() { echo "srt-user: $*" >&2; exit 1; }

if ! getent passwd "$user" >/dev/null; then
    [ "$user" = ngx-srt ] || die "user '$user' (SRT_USER) does not exist"
    command -v useradd >/dev/null || die "cannot create user ngx-srt: no useradd (apt package passwd)"
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin --comment "ngx_srt workers and scheduler" ngx-srt >/dev/null ||
        die "cannot create system user ngx-srt (useradd failed)"
fi

can() { runuser -u "$user" -- test "$@" 2>/dev/null; }

grant() {   # grant SPEC [-R] PATH: one ACL entry; setfacl's own complaint, if any, in one line
    local spec=$1 path=${*: -1} why
    shift
    command -v setfacl >/dev/null || die "user $user cannot reach $path: no setfacl (apt package acl) to grant it"
    why=$(setfacl "${@:1:$#-1}" -m "$spec" "$path" 2>&1) ||
        die "user $user cannot reach $path, and setfacl -m $spec refuses: $(echo "$why" | head -n1); clone into a directory others can read (e.g. /srv or /opt), or run as an ordinary user"
}

for path in "$@"; do
    path=$(realpath -m -- "$path")
    [ -e "$path" ] || die "$path does not exist"
    # every directory above path must let the user pass
    dir=$(dirname "$path")
    parents=()
    while :; do
        parents=("$dir" "${parents[@]}")
        [ "$dir" = / ] && break
        dir=$(dirname "$dir")
    done
    for d in "${parents[@]}"; do
        can -x "$d" || grant "u:$user:--x" "$d"
    done
    if [ -d "$path" ]; then
        if ! can -r "$path" -a -x "$path" ||
           [ -n "$(runuser -u "$user" -- find "$path" ! -readable -print -quit 2>/dev/null)" ]; then
            # some of the tree is not readable by the user (a umask 077 clone, mkstemp's 0600
            # files): read access for the user only
            grant "u:$user:rX" -R "$path"
            grant "d:u:$user:rX" -R "$path"
        fi
        can -r "$path" -a -x "$path" || die "user $user still cannot read $path"
    else
        can -r "$path" || grant "u:$user:r" "$path"
        can -r "$path" || die "user $user still cannot read $path"
    fi
done
echo "$user"
