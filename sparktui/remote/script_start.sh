# Script mode (core/actions/script.py): start the user's script detached. $1 = run
# directory; the rest is the user's argv. Prints the directory and returns at once.
dir=$1; shift
mkdir -p "$dir" || exit 2
rm -f "$dir/rc" "$dir/out"
# the detached runner's own script: $0 is the run directory, $@ the user's argv
# shellcheck disable=SC2016
runner='"$@" </dev/null >"$0/out" 2>&1; echo $? >"$0/rc.tmp"; mv "$0/rc.tmp" "$0/rc"'
if command -v setsid >/dev/null 2>&1; then
  setsid sh -c "$runner" "$dir" "$@" </dev/null >/dev/null 2>&1 &
else
  nohup sh -c "$runner" "$dir" "$@" </dev/null >/dev/null 2>&1 &
fi
echo "started in $dir"
