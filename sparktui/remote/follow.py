# The python3 engine of the log follower (protocol and arguments: core/follow_remote.py):
# stays resident, sleeps in inotify (the file and its directory), reads with pread, sends
# each block with one write, and ends as soon as its reader is gone (POLLERR/POLLHUP on
# stdout). Any python3 from 3.6 on, standard library only.
import os
import select
import struct
import sys
from time import monotonic

M = b"@@SPTUI "
IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
FILE_MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF
DIR_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)


def put(b):
    while b:
        b = b[os.write(1, b) :]


class Watch:
    # inotify on the file and its directory (ctypes; without it: plain timeouts = polling)
    def __init__(self, path):
        self.path = os.fsencode(path)
        self.dir = os.path.dirname(self.path) or b"."
        self.name = os.path.basename(self.path)
        self.ifd = self.dwd = self.fwd = -1
        try:
            import ctypes

            self.libc = ctypes.CDLL(None, use_errno=True)
            self.ifd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except Exception:
            self.ifd = -1
        self.poll = select.poll()
        self.poll.register(1, 0)  # POLLERR / POLLHUP on stdout: the reader is gone
        if self.ifd >= 0:
            self.poll.register(self.ifd, select.POLLIN)
            self.add_dir()

    @property
    def live(self):
        return self.ifd >= 0 and self.dwd >= 0

    def add_dir(self):
        self.dwd = self.libc.inotify_add_watch(self.ifd, self.dir, DIR_MASK)

    def add_file(self):
        if self.ifd < 0:
            return
        if self.fwd >= 0:
            self.libc.inotify_rm_watch(self.ifd, self.fwd)
        self.fwd = self.libc.inotify_add_watch(self.ifd, self.path, FILE_MASK)

    def wait(self, timeout):
        # until an event about the file (or the deadline); False: the reader is gone
        if self.ifd >= 0 and self.dwd < 0:
            self.add_dir()
        deadline = monotonic() + timeout
        while True:
            left = deadline - monotonic()
            if left <= 0:
                return True
            for fd, _ev in self.poll.poll(left * 1000):
                if fd == 1:
                    return False
            if self.ifd >= 0 and self.drain():
                return True

    def drain(self):
        hit = False
        while True:
            try:
                buf = os.read(self.ifd, 65536)
            except BlockingIOError:
                return hit
            i = 0
            while i + 16 <= len(buf):
                wd, mask, _cookie, n = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16 : i + 16 + n].rstrip(b"\0")
                i += 16 + n
                if mask & IN_Q_OVERFLOW or wd == self.fwd:
                    hit = True
                elif wd == self.dwd:
                    if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED):
                        self.dwd = -1
                        hit = True
                    elif name == self.name:
                        hit = True


def start_of_last_lines(fd, size, n):
    # the offset `tail -n N` starts at: after the Nth newline before the last line's end
    if n == 0 or size == 0:
        return size
    end = size - 1 if os.pread(fd, 1, size - 1) == b"\n" else size
    pos, count = end, 0
    while pos > 0:
        step = min(65536, pos)
        pos -= step
        chunk = os.pread(fd, step, pos)
        i = len(chunk)
        while True:
            i = chunk.rfind(b"\n", 0, i)
            if i < 0:
                break
            count += 1
            if count == n:
                return pos + i + 1
    return 0


def main(argv):
    path, ino, off, n = argv[0], argv[1], int(argv[2]), int(argv[3])
    poll_iv, most, wait_s = float(argv[4]), int(argv[5]), float(argv[6])
    watch = Watch(path)
    fd, missing = None, False
    while True:
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
                st = os.fstat(fd)
            except OSError:
                if fd is not None:
                    os.close(fd)
                fd = None
                if not missing:
                    put(M + b"M\n")
                missing = True
                if not watch.wait(poll_iv if not watch.live else wait_s):
                    return
                continue
            fi, fs = str(st.st_ino), st.st_size
            if fi == ino:
                if fs < off:
                    off = 0
            elif not ino and off < 0 and not missing:
                off = start_of_last_lines(fd, fs, n) if n >= 0 else 0
            else:
                off = 0
            ino, missing = fi, False
            watch.add_file()
            put(M + f"F {ino} {off}\n".encode())
        fs = os.fstat(fd).st_size
        try:
            now = str(os.stat(path).st_ino)
        except OSError:
            now = ""
        if fs < off:
            off = 0
            put(M + f"T {ino}\n".encode())
        if fs > off:
            data = os.pread(fd, min(fs - off, most), off)
            if data:
                put(M + f"D {ino} {off} {len(data)}\n".encode() + data + M + b"E\n")
                off += len(data)
                continue
        if now and now != ino:
            os.close(fd)
            fd = None
            continue
        if not watch.wait(wait_s if watch.live else poll_iv):
            return


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (BrokenPipeError, KeyboardInterrupt):
        pass
