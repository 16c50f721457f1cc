"""The node-side programs of sparktui/remote: how they load, that loading them cannot change
what they do, that they stay runnable by a node's own sh and python3, and that the names
they share with the Python side (probe sections, sentinels, markers) agree."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import threading
import tokenize
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from pathlib import Path

import pytest

from sparktui.core import follow_remote
from sparktui.core.actions import builtin
from sparktui.core.probes import ray as ray_probe
from sparktui.core.probes import script as probe
from sparktui.remote import script

REMOTE = Path(str(files("sparktui.remote")))
SH = sorted(p.name for p in REMOTE.glob("*.sh"))
PY = sorted(p.name for p in REMOTE.glob("*.py") if p.name != "__init__.py")
INCLUDE = re.compile(r"^#@include (\S+)", re.M)


def raw(name: str) -> str:
    return (REMOTE / name).read_text(encoding="utf-8")


def test_every_file_loads_and_is_cached() -> None:
    assert "probe.sh" in SH and "follow.py" in PY
    for name in SH + PY:
        text = script(name)
        assert text.strip() and script(name) is text, name


@pytest.mark.parametrize(
    "name", ["", "probe", "probe.txt", "../probe.sh", "a/b.sh", "__init__.py.bak", ".sh"]
)
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        script(name)


def test_missing_file() -> None:
    with pytest.raises(FileNotFoundError):
        script("no_such_program.sh")


def test_comment_lines_do_not_travel_and_line_numbers_stay() -> None:
    for name in SH + PY:
        text, src = script(name), raw(name)
        assert not re.search(r"^[ \t]*#", text, re.M), name
        if INCLUDE.search(src):
            continue  # test_includes_are_expanded
        assert text.count("\n") == src.count("\n"), name
        code = [ln for ln in src.splitlines() if not re.match(r"[ \t]*#", ln)]
        assert [ln for ln in text.splitlines() if ln] == [ln for ln in code if ln], name


def test_includes_are_expanded() -> None:
    check = script("_container_running.sh").strip()
    for name in ("ray_started.sh", "gcs_listening.sh", "ray_table.sh"):
        assert "#@include _container_running.sh" in raw(name)
        text = script(name)
        assert text.count(check) == 1 and text.strip().startswith(check), name
    auto = follow_remote.AUTO
    assert auto.rstrip().endswith(follow_remote.FOLLOW_SH.strip())
    assert auto.index("python3 -I -S") < auto.index(follow_remote.FOLLOW_SH.strip())


def _sh_quote_states(text: str) -> Iterator[tuple[int, str]]:
    """(line number, quote state at its end) for each line of a POSIX sh text: '' outside
    quotes, "'" or '"' inside one. Enough of sh for these files: backslash escapes outside
    single quotes, comments starting a word."""
    state, line, prev = "", 1, "\n"
    i = 0
    while i < len(text):
        ch = text[i]
        if state == "'":
            if ch == "'":
                state = ""
        elif ch == "\\":
            i += 1
            if i < len(text) and text[i] == "\n":
                line += 1
                yield line - 1, "\\"
        elif state == '"':
            if ch == '"':
                state = ""
        elif ch in "'\"":
            state = ch
        elif ch == "#" and prev in " \t\n;&|(":
            while i + 1 < len(text) and text[i + 1] != "\n":
                i += 1
        if i < len(text) and text[i] == "\n":
            yield line, state
            line += 1
        prev = text[i] if i < len(text) else ""
        i += 1


@pytest.mark.parametrize("name", SH)
def test_sh_comment_lines_are_really_comments(name: str) -> None:
    # The loader empties every line that starts with `#`: that is only safe when no such
    # line sits inside a quoted string or a here-document.
    src = raw(name)
    assert "<<" not in src, "no here-documents in remote scripts"
    inside = [n for n, st in _sh_quote_states(src) if st]
    assert inside == [], f"{name}: lines {inside} end inside a quote or a continuation"


@pytest.mark.parametrize("name", PY)
def test_py_comment_lines_are_really_comments(name: str) -> None:
    src = raw(name)
    comments = {
        tok.start[0]
        for tok in tokenize.generate_tokens(io.StringIO(src).readline)
        if tok.type == tokenize.COMMENT
    }
    starts = {n for n, ln in enumerate(src.splitlines(), 1) if re.match(r"[ \t]*#", ln)}
    assert starts <= comments, name


@pytest.mark.parametrize("name", SH)
def test_sh_syntax(name: str) -> None:
    r = subprocess.run(["sh", "-n", "-c", script(name)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name", PY)
def test_py_runs_on_an_old_node_python(name: str) -> None:
    # node python3 may be old: 3.7 syntax, standard library only, nothing run on import
    tree = ast.parse(script(name), feature_version=(3, 7))
    mods = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    mods |= {
        (n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
    }
    assert mods - set(sys.stdlib_module_names) <= ({"ray"} if name == "ray_nodes.py" else set())
    last = tree.body[-1]
    assert isinstance(last, ast.If) and "__main__" in ast.unparse(last.test), name
    top = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.If)
    assert all(isinstance(n, top) for n in tree.body), name


# --- probe sections: probe.sh and script.SECTIONS name the same set ------------------------

SECTION_USE = re.compile(r"(?:^|[\s;{(])(?:run|mark|beg|fin) ([A-Za-z_]\w*)", re.M)


def test_probe_script_emits_exactly_the_declared_sections() -> None:
    emitted = set(SECTION_USE.findall(probe.PROBE_SCRIPT))
    assert emitted == probe.SECTION_NAMES
    assert len(probe.SECTION_NAMES) == len(probe.SECTIONS)


def test_section_table_shape() -> None:
    import dataclasses

    fields = {f.name for f in dataclasses.fields(probe.ProbeResult)}
    for spec in probe.SECTIONS:
        assert spec.result_field is None or spec.result_field in fields, spec
    order = [s.name for s in probe.SECTIONS]
    assert order.index("meminfo") < order.index("gpus")  # unified memory reads meminfo
    assert order.index("addr") < order.index("addr4")
    assert order.index("health") < order.index("metrics") < order.index("version")
    assert probe.MISSING_TOOL == {
        "addr": "ip",
        "containers": "docker",
        "gpus": "nvidia-smi",
        "gpu_apps": "nvidia-smi",
        "health": "curl or python3",
        "gcs_conns": "awk",
    }
    assert order.index("addr4") < order.index("gcs_conns")  # the head's own IPs are left out
    assert probe.PROBE_SCRIPT.count(probe.SENTINEL) >= 3


def test_probe_hands_on_the_helper_programs() -> None:
    cmd = probe.build_probe("n", "c", True)
    assert cmd.argv[-8:-4] == (ray_probe.RAY_NODES_SNIPPET, probe.ENV_SCRIPT, probe.HTTP_PY, "")
    assert cmd.argv[-2:] == ("gpus,apps", "")  # every nvidia-smi query, env read
    assert ray_probe.RAY_NODES_SNIPPET == script("ray_nodes.py")


# --- names shared with the Python side -------------------------------------------------------


def test_shared_names_agree() -> None:
    snippet = ray_probe.RAY_NODES_SNIPPET
    assert ray_probe.NODES_SENTINEL in snippet and ray_probe.ERROR_SENTINEL in snippet
    assert builtin.SERVE_MARKER_PREFIX in builtin.SERVE_SCRIPT
    assert f'M = b"{follow_remote.MAGIC.decode()}"' in follow_remote.FOLLOW_PY
    assert follow_remote.MAGIC.decode().strip() in follow_remote.FOLLOW_SH


def test_ray_snippet_reports_an_error_without_ray() -> None:
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", ray_probe.RAY_NODES_SNIPPET],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0
    assert any(
        ln.startswith(ray_probe.ERROR_SENTINEL) or ln.startswith(ray_probe.NODES_SENTINEL)
        for ln in r.stdout.splitlines()
    )


# --- health.sh with the python3 client (no curl) -------------------------------------------


@pytest.fixture
def health_server() -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def _bare_path(tmp_path: Path, *tools: str) -> str:
    import shutil

    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for t in ("sh", *tools):
        real = shutil.which(t)
        if real:
            (d / t).symlink_to(real)
    return str(d)


def _health(port: int, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "sh",
            "-c",
            builtin.HEALTH_SCRIPT,
            "sh",
            script("http_get.py"),
            str(port),
            "no-such-container",
        ],
        capture_output=True,
        text=True,
        env={"PATH": path},
        timeout=30,
    )


def test_health_without_curl_uses_the_python_client(health_server: int, tmp_path: Path) -> None:
    import shutil

    if shutil.which("python3") is None:
        pytest.skip("needs python3 on PATH")
    path = _bare_path(tmp_path, "python3")
    r = _health(health_server, path)
    assert (r.returncode, r.stdout.strip()) == (0, "healthy (HTTP 200)")


def test_health_without_curl_server_down(tmp_path: Path) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = _health(port, _bare_path(tmp_path, "python3"))
    assert r.returncode == 3 and "container no-such-container is gone" in r.stdout
