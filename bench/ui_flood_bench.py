"""The console under a log flood: 20,000 lines/s for 30 s (--quick: 10 s).

The real console runs in a child process on a pseudo-terminal (160x50, Textual's real
Linux driver: keys are parsed from the bytes a terminal sends, every frame is rendered to
escape sequences and written to the pty, which this process drains). Its backend is the
real `LiveBackend` on a config with one `host: local` head whose `vllm.log` is a local file:
the real follower (`FileFollower` through `LocalTransport`), the knowledge-base scan and
the monitor (polling the local machine as usual). A writer subprocess appends realistic
vLLM lines (the healthy-serve fixture, numbered) at the target rate, in 5 ms ticks.

Key-to-render latency. While the flood runs, this process presses keys one at a time by
writing their bytes to the pty: `/` (filter opens), `e` (filter "e"), backspace (filter
cleared), Enter (filter closes), `f` twice (findings-only on, off), PageUp (log paused
where it is), `G` (back to the newest line), again and again, 100-250 ms apart. Before
each key the child is told what the key must change on screen and acknowledges; t0 is
CLOCK_MONOTONIC just before the key's bytes are written to the pty. In the child, every
frame the app writes (`App._display`, which renders a compositor update to the terminal)
is checked against that expectation, from what the frame itself was composed of: the
filter box is (or is no longer) part of the compositor's last update, or the LogView
lines drawn for this frame (`render_lines`, called while the frame is composed) were drawn
with the expected filter / findings-only / pinned state, after the key was armed. The time
that frame has been handed to the driver, minus t0, is the key's latency (same clock).
Figure: p99 (target ≤ 150 ms).

RSS: of the child process that runs the app (VmHWM, the kernel's peak of its resident
set; target ≤ 250 MB absolute); the note gives its growth from just before the app was
created (imports done).

Line count: the LogView's counter of lines received (`LogView.received`) at the end must
equal the number of lines the writer wrote (the pane keeps only the newest 20,000).

`python -m bench.ui_flood_bench [SECONDS]` prints the raw figures and the latency per key;
with FLOOD_PYSPY=out.txt, py-spy (if installed) samples the console meanwhile (raw format).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import queue
import random
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

from bench.common import Row, limit_row

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "vllm" / "vllm_cpu_serve_ok.log"
RATE = 20_000
COLS, ROWS = 160, 50

WRITER = r"""
import os, sys, time
path, rate, seconds, src = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
base = [ln.rstrip("\n") for ln in open(src, encoding="utf-8") if ln.strip()]
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
written = 0
start = time.monotonic()
while True:
    elapsed = time.monotonic() - start
    due = int(rate * min(elapsed, seconds))
    if due > written:
        os.write(fd, "".join(f"{base[i % len(base)]} [flood {i}]\n"
                             for i in range(written, due)).encode())
        written = due
    if elapsed >= seconds:
        break
    time.sleep(0.005)
print(written, time.monotonic() - start)
"""

# (name, bytes sent, what the frame must show)
KEYS = [
    ("/", b"/", "box-shown"),
    ("e", b"e", "filter-e"),
    ("backspace", b"\x7f", "filter-none"),
    ("enter", b"\r", "box-hidden"),
    ("f", b"f", "findings-on"),
    ("f", b"f", "findings-off"),
    ("pageup", b"\x1b[5~", "unpinned"),
    ("G", b"G", "pinned"),
]


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status(pid: int | str, key: str) -> int:
    """A kB field of /proc/<pid>/status, in bytes."""
    for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
        if ln.startswith(key + ":"):
            return int(ln.split()[1]) * 1024
    return 0


# ------------------------------------------------------------------ the child (the app)


class _Probe:
    """Hooks in the app: what each frame was composed of, and the armed expectation."""

    def __init__(self, app, ctl_in: int, ctl_out: int, rss0: int) -> None:
        self.app = app
        self.ctl_in, self.ctl_out = ctl_in, ctl_out
        self.rss0 = rss0
        self.pending: tuple[int, str, int] | None = None
        self.lv: tuple[int, str, bool, bool] = (0, "", False, True)
        self.frames = 0
        self.buf = b""
        self.done_at: int | None = None
        self.expected: int | None = None

    def send(self, text: str) -> None:
        os.write(self.ctl_out, (text + "\n").encode())

    def install(self) -> None:
        from textual.widgets import Input

        app = self.app
        self.view = view = app.log_view
        self.screen = app.screen_stack[0]
        self.box = self.screen.query_one("#log-filter", Input)
        render_lines = view.render_lines

        def lv_render_lines(crop):
            self.lv = (time.monotonic_ns(), view.filter_text, view.findings_only, view.pinned)
            return render_lines(crop)

        view.render_lines = lv_render_lines
        display = app._display

        def _display(screen, renderable) -> None:
            display(screen, renderable)
            if renderable is None:
                return
            self.frames += 1
            if self.pending is not None and self._shown(self.pending):
                self.send(f"match {self.pending[0]} {time.monotonic_ns()}")
                self.pending = None

        app._display = _display
        os.set_blocking(self.ctl_in, False)
        import asyncio

        asyncio.get_running_loop().add_reader(self.ctl_in, self._on_ctl)
        app.set_interval(0.05, self._check_done)
        self.send(f"ready {time.monotonic_ns()}")

    def _shown(self, pending: tuple[int, str, int]) -> bool:
        _i, what, armed = pending
        if what == "box-shown":
            return self.box in self.screen._compositor
        if what == "box-hidden":
            return self.box not in self.screen._compositor
        t, filt, findings, pinned = self.lv
        if t <= armed:
            return False
        return {
            "filter-e": filt == "e",
            "filter-none": filt == "",
            "findings-on": findings,
            "findings-off": not findings,
            "unpinned": not pinned,
            "pinned": pinned,
        }[what]

    def _on_ctl(self) -> None:
        try:
            data = os.read(self.ctl_in, 4096)
        except BlockingIOError:
            return
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for ln in lines:
            cmd, *args = ln.decode().split()
            if cmd == "arm":
                self.pending = (int(args[0]), args[1], time.monotonic_ns())
                self.send(f"armed {args[0]}")
            elif cmd == "done":
                self.expected = int(args[0])
                self.done_at = time.monotonic_ns()

    def _check_done(self) -> None:
        if self.expected is None:
            return
        received = self.view.received
        waited = (time.monotonic_ns() - (self.done_at or 0)) / 1e9
        if received >= self.expected or waited > 60:
            follower = getattr(self.app.backend, "_follower", None)
            self.send(
                "final "
                + json.dumps(
                    {
                        "received": received,
                        "waited": waited,
                        "frames": self.frames,
                        "delivered": getattr(follower, "lines_delivered", None),
                        "rss0": self.rss0,
                        "hwm": _status("self", "VmHWM"),
                        "rss": _status("self", "VmRSS"),
                    }
                )
            )
            self.expected = None
            self.app.exit()


def child(cfg_path: str, ctl_in: int, ctl_out: int) -> None:
    from sparktui import config
    from sparktui.tui.app import SparkApp
    from sparktui.tui.live import LiveBackend

    rss0 = _status("self", "VmRSS")
    cfg = config.load(cfg_path)
    app = SparkApp(LiveBackend(cfg))
    probe = _Probe(app, ctl_in, ctl_out, rss0)
    main_ready = app.main_ready

    def ready() -> None:
        main_ready()
        probe.install()

    app.main_ready = ready
    app.run()


# ------------------------------------------------------------------ the bench (parent)


def _drain(fd: int, counter: list[int], tail: bytearray) -> None:
    """Read the console's terminal output (Textual writes it to stderr) like a terminal."""
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except OSError:
            return
        if not data:
            return
        counter[0] += len(data)
        tail += data
        del tail[:-4000]


def _lines(fd: int, out: queue.Queue) -> None:
    buf = b""
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:
            out.put(None)
            return
        buf += data
        *lines, buf = buf.split(b"\n")
        for ln in lines:
            out.put(ln.decode())


def _expect(q: queue.Queue, prefix: str, timeout: float) -> list[str] | None:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            msg = q.get(timeout=left)
        except queue.Empty:
            return None
        if msg is None:
            raise RuntimeError("the console process ended early")
        if msg.startswith(prefix + " ") or msg == prefix:
            return [msg[len(prefix) + 1 :]] if msg != prefix else []


def flood(seconds: float, rate: int = RATE) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="sparktui-flood-"))
    log = tmp / "vllm.log"
    log.write_text("")
    cfg = tmp / "sparktui.yaml"
    cfg.write_text(
        "cluster: {name: flood}\nnodes:\n  - {name: local, host: local, role: head}\n"
        f"vllm: {{log: {json.dumps(str(log))}}}\n"
    )
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    p2c_r, p2c_w = os.pipe()
    c2p_r, c2p_w = os.pipe()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TERM="xterm-256color", PYTHONPATH=str(ROOT))
    for k in ("TEXTUAL", "TEXTUAL_ANIMATIONS"):  # the defaults an operator has
        env.pop(k, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.ui_flood_bench", "--child", str(cfg), str(p2c_r), str(c2p_w)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        pass_fds=(p2c_r, c2p_w),
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    os.close(slave), os.close(p2c_r), os.close(c2p_w)
    out_bytes = [0]
    tty_tail = bytearray()
    msgs: queue.Queue = queue.Queue()
    threading.Thread(target=_drain, args=(master, out_bytes, tty_tail), daemon=True).start()
    threading.Thread(target=_lines, args=(c2p_r, msgs), daemon=True).start()
    writer = None
    try:
        if _expect(msgs, "ready", 60) is None:
            raise RuntimeError(
                "the console did not start: " + tty_tail.decode("utf-8", "replace")[-2000:]
            )
        time.sleep(1.0)  # the follower is running, the first refresh done
        cpu0 = _cpu(proc.pid)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(log), str(rate), str(seconds), str(FIXTURE)],
            stdout=subprocess.PIPE,
            text=True,
        )
        spy = None
        if os.environ.get("FLOOD_PYSPY"):  # profile the console while it floods
            spy = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "-p",
                    str(proc.pid),
                    "-d",
                    str(int(seconds)),
                    "-r",
                    "100",
                    "--nonblocking",
                    "-f",
                    "raw",
                    "-o",
                    os.environ["FLOOD_PYSPY"],
                ],
                stdout=subprocess.DEVNULL,
            )
        latencies: list[tuple[str, float]] = []
        rss_max = 0
        i = 0
        while writer.poll() is None:
            time.sleep(random.uniform(0.1, 0.25))
            name, data, what = KEYS[i % len(KEYS)]
            os.write(p2c_w, f"arm {i} {what}\n".encode())
            if _expect(msgs, f"armed {i}", 10) is None:
                raise RuntimeError("the console does not answer")
            t0 = time.monotonic_ns()
            os.write(master, data)
            got = _expect(msgs, f"match {i}", 5)
            latencies.append((name, (int(got[0]) - t0) / 1e9 if got else 5.0))
            rss_max = max(rss_max, _status(proc.pid, "VmRSS"))
            i += 1
        out, _ = writer.communicate()
        cpu = _cpu(proc.pid) - cpu0
        if spy is not None:
            spy.wait(60)
        written, wrote_for = out.split()
        os.write(p2c_w, f"done {written}\n".encode())
        final = _expect(msgs, "final", 90)
        if final is None:
            raise RuntimeError("the console did not report its line count")
        result = json.loads(final[0])
        proc.wait(30)
        result.update(
            written=int(written),
            wrote_for=float(wrote_for),
            latencies=latencies,
            rss_sampled_max=rss_max,
            tty_bytes=out_bytes[0],
            cpu=cpu,
            seconds=seconds,
            rate=rate,
        )
        return result
    finally:
        if writer is not None and writer.poll() is None:
            writer.kill()
            writer.wait()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for fd in (master, p2c_w, c2p_r):
            try:
                os.close(fd)
            except OSError:
                pass
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def rows(r: dict) -> list[Row]:
    lat = [x for _, x in r["latencies"]]
    worst = max(r["latencies"], key=lambda kv: kv[1]) if lat else ("-", 0.0)
    mb = 1024 * 1024
    label = f"UI at {r['rate'] // 1000}k lines/s for {r['seconds']:g} s"
    achieved = r["written"] / r["wrote_for"] if r["wrote_for"] else 0
    p99 = _pct(lat, 0.99) if lat else float("inf")
    key_row = limit_row(
        f"{label}: p99 key-to-render",
        p99 * 1000,
        "ms",
        150,
        note=f"{len(lat)} keys, median {_pct(lat, 0.5) * 1000:.1f} ms, "
        f"worst {worst[1] * 1000:.0f} ms ({worst[0]}); "
        f"{r['frames']} frames, {achieved:,.0f} lines/s written, "
        f"console CPU {100 * r['cpu'] / r['wrote_for']:.0f}% of a core",
    )
    rss_row = limit_row(
        f"{label}: peak RSS of the console process",
        r["hwm"] / mb,
        "MB",
        250,
        note=f"VmHWM; {r['rss0'] / mb:.0f} MB before the app, "
        f"+{(r['hwm'] - r['rss0']) / mb:.0f} MB growth",
    )
    count_row = Row(
        f"{label}: lines in the log pane",
        r["received"],
        "lines",
        "lines written",
        r["written"],
        "= written",
        ok=r["received"] == r["written"],
        note=f"follower delivered {r['delivered']}, "
        f"drained {r['waited']:.1f} s after the writer stopped",
    )
    return [key_row, rss_row, count_row]


def run(quick: bool) -> list[Row]:
    return rows(flood(10 if quick else 30))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        res = flood(float(sys.argv[1]) if len(sys.argv) > 1 else 10)
        lats = res.pop("latencies")
        print(json.dumps(res, indent=1))
        by: dict[str, list[float]] = {}
        for name, x in lats:
            by.setdefault(name, []).append(x * 1000)
        for name, xs in by.items():
            print(
                f"{name:10} n={len(xs):3} median {sorted(xs)[len(xs) // 2]:7.1f} ms  "
                f"max {max(xs):7.1f} ms"
            )
        for r in rows({**res, "latencies": lats}):
            print(r)
