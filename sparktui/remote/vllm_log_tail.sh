# The end of vLLM's log on the head, for the start-up phase (core/lifecycle.py): $1 the log
# path, $2 how many bytes at most. First line `mtime=<unix s> size=<bytes>`, then the bytes.
# A missing log prints `missing` and exits 0 (vLLM was not started yet).
[ -f "$1" ] || { echo missing; exit 0; }
m=$(stat -c %Y "$1" 2>/dev/null) || m=
s=$(stat -c %s "$1" 2>/dev/null) || s=
printf 'mtime=%s size=%s\n' "$m" "$s"
exec tail -c "$2" "$1"
