# `sh -c "$AUTO" sh <follow.py> <follower arguments>`: the python engine where python3
# exists, else the sh engine (follow.sh, included below) with the same arguments.
py=$1; shift
if command -v python3 >/dev/null 2>&1; then exec python3 -I -S -c "$py" "$@"; fi
#@include follow.sh
