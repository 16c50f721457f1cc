# Script mode: exit 0 with the output tail once the script in run directory $1 has
# finished; 1 while it runs.
if [ -f "$1/rc" ]; then echo "@@RC $(cat "$1/rc")"; tail -n 40 "$1/out" 2>/dev/null; exit 0; fi
echo "running; last output:"; tail -n 3 "$1/out" 2>/dev/null; exit 1
