"""The node container image, built without a registry and cached by its inputs.

Rootfs = busybox-static applets + bash + Debian's python3.11 (stdlib and the `ldd` closure of
every ELF file) + `pip install --root R --prefix /usr --ignore-installed <spec.pip>` from
wheels cached under ~/.cache/sparktui-lab/wheels. The tarball is cached under
~/.cache/sparktui-lab/images/<key>.tar and `docker import`ed into each node.

An `ImageSpec` describes one image; another spec (e.g. a vLLM one) can add pip packages,
uninstalls, files and env without touching the builder.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.lab.proc import LabError, run
from tests.lab.state import CACHE_DIR

RECIPE_REVISION = 1  # bump when the builder below changes what goes into an image

BASE_ENV: dict[str, str] = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/root",
    "PYTHONUNBUFFERED": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_OVERRIDE_RESOURCES": '{"GPU":1}',
    "RAY_memory_monitor_refresh_ms": "0",
    "DO_NOT_TRACK": "1",
}
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data"}


@dataclass(frozen=True)
class ImageSpec:
    """What goes into an image; its `key` (and so the cache and the tag) follows from it."""

    name: str = "ray"
    pip: tuple[str, ...] = ("ray==2.60.0",)
    pip_uninstall: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = tuple(BASE_ENV.items())
    files: tuple[tuple[str, str], ...] = ()  # (absolute path in the image, text)
    python: str = "/usr/bin/python3.11"
    # host programs copied in with their libraries (procps: busybox-static has no pgrep)
    extra_bins: tuple[str, ...] = ("/usr/bin/pgrep", "/usr/bin/pkill", "/usr/bin/ps")
    pip_args: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        h = hashlib.sha256()
        h.update(
            json.dumps(
                [
                    RECIPE_REVISION,
                    self.name,
                    self.pip,
                    self.pip_uninstall,
                    self.env,
                    self.files,
                    self.python,
                    self.extra_bins,
                    self.pip_args,
                ]
            ).encode()
        )
        h.update(run([self.python, "-c", "import sys; print(sys.version)"]).stdout.encode())
        return h.hexdigest()[:12]

    @property
    def tag(self) -> str:
        return f"sparklab/{self.name}:{self.key}"


RAY_IMAGE = ImageSpec()


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def tarball(spec: ImageSpec = RAY_IMAGE, log=print) -> Path:
    """The cached image tarball for `spec`, built first if missing."""
    images = CACHE_DIR / "images"
    out = images / f"{spec.name}-{spec.key}.tar"
    if out.exists():
        return out
    with file_lock(images / ".lock"):
        if out.exists():
            return out
        t0 = time.monotonic()
        build = CACHE_DIR / f"build-{spec.name}-{os.getpid()}"
        shutil.rmtree(build, ignore_errors=True)
        try:
            root = build / "root"
            _rootfs(spec, root)
            tmp = build / "image.tar"
            run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(tmp), "."], timeout=600)
            tmp.replace(out)
        finally:
            shutil.rmtree(build, ignore_errors=True)
        log(f"built image {spec.tag} in {time.monotonic() - t0:.1f}s: {out}")
    return out


def _copy(src: str, root: Path) -> None:
    """Copy a host file (following symlinks) to the same path under root."""
    dest = root / src.lstrip("/")
    if dest.exists() or dest.is_symlink():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest)


def _rootfs(spec: ImageSpec, root: Path) -> None:
    for d in (
        "usr/bin",
        "usr/sbin",
        "usr/lib64",
        "usr/lib",
        "usr/local/bin",
        "usr/local/sbin",
        "etc",
        "root",
        "proc",
        "sys",
        "dev",
        "run",
        "var/tmp",
        "var/log",
        "home",
        "opt",
    ):
        (root / d).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "sbin", "lib", "lib64"):  # merged /usr, as on Debian 12
        (root / link).symlink_to(f"usr/{link}")
    (root / "tmp").mkdir(mode=0o1777)
    os.chmod(root / "tmp", 0o1777)
    # busybox applets (sh, env, cat, tail, pgrep, ps, ...) then bash and python on top
    _copy("/usr/bin/busybox", root) if os.path.exists("/usr/bin/busybox") else _copy(
        "/bin/busybox", root
    )
    applets = run([str(root / "usr/bin/busybox"), "--list-full"]).stdout.split()
    for applet in applets:
        dest = root / applet  # bin/, sbin/ resolve through the merged-/usr links
        if not dest.exists() and not dest.is_symlink():
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.symlink_to("/usr/bin/busybox")
    for prog in ("/usr/bin/bash", spec.python, *spec.extra_bins):
        if not os.path.exists(prog):
            continue
        dest = root / prog.lstrip("/")
        if dest.is_symlink():
            dest.unlink()
        _copy(prog, root)
    (root / "usr/bin/sh").unlink(missing_ok=True)
    (root / "usr/bin/sh").symlink_to("bash")
    pyname = Path(spec.python).name  # python3.11
    for alias in ("python3", "python"):
        (root / "usr/bin" / alias).unlink(missing_ok=True)
        (root / "usr/bin" / alias).symlink_to(pyname)
    stdlib = Path("/usr/lib") / pyname
    shutil.copytree(
        stdlib,
        root / stdlib.relative_to("/"),
        symlinks=True,
        ignore=lambda d, names: [n for n in names if n in STDLIB_SKIP and Path(d) == stdlib],
    )
    etc_py = Path("/etc") / pyname  # Debian's sitecustomize.py links into it
    if etc_py.is_dir():
        shutil.copytree(etc_py, root / "etc" / pyname)
    _etc(root)
    _pip(spec, root)
    for path, text in spec.files:
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    _ldd_closure(root)


def _etc(root: Path) -> None:
    etc = root / "etc"
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files dns\n")
    (etc / "os-release").write_text('PRETTY_NAME="sparktui lab node image"\nID=sparklab\n')
    for f in ("hosts", "hostname", "resolv.conf"):
        (etc / f).touch()


def _pip(spec: ImageSpec, root: Path) -> None:
    wheels = CACHE_DIR / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    base = [spec.python, "-m", "pip", "--disable-pip-version-check", "-q"]
    install = base + [
        "install",
        "--root",
        str(root),
        "--prefix",
        "/usr",
        "--ignore-installed",
        "--no-warn-script-location",
        "--break-system-packages",
        "--no-index",
        "--find-links",
        str(wheels),
        *spec.pip_args,
        *spec.pip,
    ]
    if run(install, check=False, timeout=900).returncode != 0:
        run(base + ["download", "-d", str(wheels), *spec.pip_args, *spec.pip], timeout=900)
        run(install, timeout=900)
    if spec.pip_uninstall:
        site = root / "usr/local/lib" / Path(spec.python).name / "dist-packages"
        run(
            [
                spec.python,
                "-m",
                "pip",
                "--disable-pip-version-check",
                "-q",
                "uninstall",
                "-y",
                "--break-system-packages",
                *spec.pip_uninstall,
            ],
            env={"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", "/usr/bin")},
        )


def _elf_files(root: Path) -> list[str]:
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            try:
                with open(p, "rb") as fh:
                    if fh.read(4) == b"\x7fELF":
                        out.append(p)
            except OSError:
                continue
    return out


LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


def _ldd_closure(root: Path) -> None:
    """Copy every shared library the image's ELF files need from the host."""
    done: set[str] = set()
    todo = _elf_files(root)
    while todo:
        batch, todo = todo[:64], todo[64:]
        text = run(["ldd", *batch], check=False).stdout
        for m in LDD_LINE.finditer(text):
            lib = m.group(1)
            if lib in done or not os.path.exists(lib):
                continue
            done.add(lib)
            dest = root / lib.lstrip("/")
            if not dest.exists():
                _copy(lib, root)
                todo.append(str(dest))
    if not (root / "usr/lib64/ld-linux-x86-64.so.2").exists():
        raise LabError("image: the dynamic loader was not copied (ldd closure failed)")


def import_args(spec: ImageSpec) -> list[str]:
    """`docker import` arguments (the image config) for spec."""
    args: list[str] = []
    for k, v in spec.env:
        args += ["-c", f"ENV {k}={json.dumps(v)}"]
    args += ["-c", "WORKDIR /root", "-c", 'CMD ["/bin/bash"]']
    return args
