# Ray worker logs of one node, newest first: $1 directory, $2 pid or "" (all), $3 how many.
cd "$1" 2>/dev/null || exit 0
# ls -t: newest first; Ray names these files worker-<id>-<job>-<pid>.{err,out}, no odd bytes
# shellcheck disable=SC2012
ls -t -- worker-*"$2".err worker-*"$2".out 2>/dev/null | head -n "$3" | sed "s|^|$1/|"
