# The POSIX sh engine of the log follower (protocol and arguments: core/follow_remote.py),
# for nodes without python3. With GNU tail and timeout it wakes on inotify through
# `tail -F | timeout head -c 1`; otherwise it polls every $5 s. Its idle heartbeat ends it
# (SIGPIPE) once the reader is gone.
p=$1; ino=$2; off=$3; n=$4; iv=$5; max=$6; wt=${7:-2}; open=0; missing=0; ev=0; idle=0
case $(tail --version 2>/dev/null) in *GNU*) command -v timeout >/dev/null && ev=1 ;; esac
while :; do
  if [ "$open" = 0 ]; then
    if [ -r "$p" ] && command exec 3<"$p" 2>/dev/null; then
      # stat prints "<inode> <size>": split into $1 $2 on purpose
      # shellcheck disable=SC2046
      set -- $(stat -L -c '%i %s' /dev/fd/3 2>/dev/null)
      fi=$1; fs=$2
      if [ "$fi" = "$ino" ]; then
        [ "$fs" -lt "$off" ] && off=0
      elif [ -z "$ino" ] && [ "$off" -lt 0 ] && [ "$missing" = 0 ]; then
        if [ "$n" -ge 0 ]; then off=$((fs - $(tail -n "$n" /dev/fd/3 | wc -c))); else off=0; fi
      else
        off=0
      fi
      ino=$fi; open=1; missing=0
      printf '@@SPTUI F %s %s\n' "$ino" "$off" || exit 0
    else
      [ "$missing" = 1 ] || printf '@@SPTUI M\n' || exit 0
      missing=1; sleep "$iv"; continue
    fi
  fi
  # "<inode> <size>" of the open file, then the inode now at the path: split on purpose
  # shellcheck disable=SC2046
  set -- $(stat -L -c '%i %s' /dev/fd/3 "$p" 2>/dev/null)
  fs=$2; pi=${3:-}
  if [ "$fs" -lt "$off" ]; then off=0; printf '@@SPTUI T %s\n' "$ino" || exit 0; fi
  if [ "$fs" -gt "$off" ]; then
    len=$((fs - off)); [ "$len" -gt "$max" ] && len=$max
    printf '@@SPTUI D %s %s %s\n' "$ino" "$off" "$len" || exit 0
    tail -c +$((off + 1)) /dev/fd/3 | head -c "$len"
    printf '@@SPTUI E\n' || exit 0
    off=$((off + len)); idle=0
    continue
  fi
  if [ -n "$pi" ] && [ "$pi" != "$ino" ]; then exec 3<&-; open=0; continue; fi
  if [ "$ev" = 1 ] && [ "$pi" = "$ino" ] && [ "$idle" = 0 ]; then
    tail -c +$((off + 1)) -F -- "$p" 2>&1 | timeout "$wt" head -c 1 >/dev/null && idle=1
  else
    idle=0; sleep "$iv"
  fi
  [ "$idle" = 1 ] || printf '@@SPTUI H\n' || exit 0
done
