"""The programs a FileFollower runs on the node: one protocol, two engines.

Both follow one file by name with `tail -F` semantics and frame everything they send:

    @@SPTUI F <inode> <offset>        opened the file, reading from <offset>
    @@SPTUI T <inode>                 the file was truncated; reading from 0
    @@SPTUI M                         the file does not exist (yet)
    @@SPTUI D <inode> <offset> <len>  then exactly <len> bytes of the file, then
    @@SPTUI E                         end of that data block
    @@SPTUI H                         heartbeat while idle (sh engine: ends it once unread)

Arguments: $1 path, $2 inode to resume ("" = none), $3 offset (-1 = start at the last $4
lines; $4 = -1: from the beginning), $5 poll interval (s), $6 maximum block size (bytes),
$7 longest event wait (s).

The engines are files of `sparktui.remote` (follow.py, follow.sh, follow_auto.sh).
`FOLLOW_PY` (python3, any 3.6+, standard library only) stays resident: it sleeps in inotify
(the file and its directory), reads with pread and sends each block with one write, so a
line appended on the node is on the wire within microseconds, as with `tail -F`. It ends as
soon as its reader is gone (POLLERR/POLLHUP on stdout), never lingering on the node.

`FOLLOW_SH` is the POSIX sh fallback for nodes without python3: with GNU tail and timeout
it wakes on inotify through `tail -F | timeout head -c 1` (a few processes per wake, a few
ms), otherwise it polls every $5 s. Its idle heartbeat ends it (SIGPIPE) once the reader
is gone.

`AUTO` runs FOLLOW_PY when python3 exists, else FOLLOW_SH; the client runs FOLLOW_SH
itself when asked to (engine "sh") or when python3 failed before its first frame.
"""

from __future__ import annotations

from sparktui.remote import script

MAGIC = b"@@SPTUI "

# The engines (sparktui/remote/): follow.sh, follow.py, and follow_auto.sh (a python3 check,
# then follow.sh): `sh -c AUTO sh FOLLOW_PY <arguments>`.
FOLLOW_SH = script("follow.sh")
FOLLOW_PY = script("follow.py")
AUTO = script("follow_auto.sh")
