# Sourced by setup.sh and the install scripts in tools/: whether a folder or file is this user's own,
# by the rule of cadedit's own caches (cadedit/settings.py `not_own`, docs/trust.md "Shared folders"):
# not a symbolic link, owned by this user, writable by no one else (no group or other write bit). A
# cache folder another user controls could hold their llama-server or wheel in place of ours, and the
# script would run it as this user.

# own_problem PATH: prints why PATH is not this user's own and fails; silent and true when it is, or
# when it does not exist (whoever makes it, this script, makes it as its own).
own_problem() {
    local path=$1 info uid mode
    if [ -L "$path" ]; then echo "a symbolic link"; return 1; fi
    [ -e "$path" ] || return 0
    info=$(stat -c '%u %a' -- "$path" 2>/dev/null || stat -f '%u %Lp' -- "$path") \
        || { echo "cannot be looked at"; return 1; }
    uid=${info% *} mode=${info#* }
    if [ "$uid" != "$(id -u)" ] || (( 8#$mode & 8#022 )); then
        printf 'owner uid %s, mode %04o\n' "$uid" "$((8#$mode))"
        return 1
    fi
}

# own_chain TOP PATH: TOP and every folder below it down to PATH (itself included) checked with
# own_problem; prints "PART: why" for the first one that is not this user's own, and fails.
own_chain() {
    local top=${1%/} path=$2 part why name names
    part=$top
    why=$(own_problem "$part") || { echo "$part: $why"; return 1; }
    IFS=/ read -r -a names <<< "${path#"$top"}"
    for name in "${names[@]}"; do
        [ -n "$name" ] || continue
        part=$part/$name
        why=$(own_problem "$part") || { echo "$part: $why"; return 1; }
    done
}

# own_tree DIR: DIR and everything in it checked with own_problem; prints "PART: why" for the first
# entry that is not this user's own (a link, another owner, group- or other-writable), and fails.
own_tree() {
    local dir=$1 why found
    why=$(own_problem "$dir") || { echo "$dir: $why"; return 1; }
    [ -d "$dir" ] || return 0
    found=$(find "$dir" -mindepth 1 \( -type l -o ! -uid "$(id -u)" -o -perm /022 \) -print -quit 2>&1) \
        || { echo "$dir: cannot be looked through ($found)"; return 1; }
    [ -z "$found" ] && return 0
    echo "$found: $(own_problem "$found")"
    return 1
}

# own_or_refuse WHAT HINT PROBLEM: when PROBLEM (own_chain's or own_tree's output) is not empty, the
# one-line error naming it and saying WHAT is not done, HINT, and exit 1.
own_or_refuse() {
    [ -z "$3" ] && return 0
    echo "error: $3: not your own, so $1" >&2
    echo "hint: $2" >&2
    exit 1
}

# own_pip_cache PYTHON: pip installs wheels it finds in its cache (a planted one would be built code
# run as this user); refuse a pip cache (PIP_CACHE_DIR, else XDG_CACHE_HOME/pip) that is not ours.
own_pip_cache() {
    local dir
    dir=$("$1" -I -m pip cache dir 2>/dev/null) || return 0  # the cache is off (PIP_NO_CACHE_DIR)
    own_or_refuse "pip would install what it finds there" \
        "make it yours (chmod -R go-w, or remove it), use a folder of yours (PIP_CACHE_DIR=DIR), or turn pip's cache off (PIP_NO_CACHE_DIR=1)" \
        "$(own_tree "$dir")"
}
