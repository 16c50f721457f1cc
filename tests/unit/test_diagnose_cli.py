"""`sparktui diagnose`: the real CLI (subprocess) and in-process via cli.main."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparktui import cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
VLLM = FIXTURES / "vllm"
ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    """No user config is found (HOME, XDG, cwd point at an empty directory)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SPARKTUI_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def sparktui(*args: str, stdin: bytes | None = None, env_dir: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, HOME=str(env_dir), XDG_CONFIG_HOME=str(env_dir / "xdg"), PYTHONPATH=str(ROOT)
    )
    env.pop("SPARKTUI_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "sparktui", "diagnose", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        env=env,
        cwd=env_dir,
    )


def test_json_for_the_ip_mismatch_log_root_cause_first(tmp_path):
    r = sparktui("--json", str(VLLM / "vllm_ray_ip_mismatch.log"), env_dir=tmp_path)
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    first = data["findings"][0]
    assert set(first) >= {"id", "category", "severity", "title", "line", "text", "fix", "captures"}
    assert (first["id"], first["category"], first["severity"], first["line"]) == (
        "pg.no_node_type",
        "placement_group_ip_mismatch",
        "error",
        33,
    )
    assert first["captures"]["ip"] == "198.19.200.101"
    assert "VLLM_HOST_IP" in first["fix"]
    assert [f["category"] for f in data["findings"]] == [
        "placement_group_ip_mismatch",
        "engine_startup",
    ]


def test_healthy_log_exits_0(tmp_path):
    r = sparktui(str(VLLM / "vllm_cpu_serve_ok.log"), env_dir=tmp_path)
    assert r.returncode == 0
    assert "no known crash signature" in r.stdout.decode()
    j = sparktui("--json", str(VLLM / "vllm_cpu_serve_ok.log"), env_dir=tmp_path)
    assert (j.returncode, json.loads(j.stdout)) == (0, {"findings": []})


def test_stdin_with_dash_and_without_argument(tmp_path):
    data = (VLLM / "vllm_port_in_use.log").read_bytes()
    for args in (["--json", "-"], ["--json"]):
        r = sparktui(*args, stdin=data, env_dir=tmp_path)
        assert r.returncode == 1
        assert json.loads(r.stdout)["findings"][0]["category"] == "port_in_use"


def test_human_output_is_a_plain_list(tmp_path):
    r = sparktui(str(VLLM / "torch_cuda_oom_h200.log"), env_dir=tmp_path)
    out = r.stdout.decode()
    assert r.returncode == 1
    assert "1. [ERROR] CUDA out of memory" in out
    assert "category: cuda_oom_kv_cache" in out and "line: 3" in out
    assert "fix:" in out and "1. Increase TP/PP" in out


def test_missing_file_is_one_line_exit_2(tmp_path):
    r = sparktui(str(tmp_path / "nope.log"), env_dir=tmp_path)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "Traceback" not in err and err.count("\n") == 1 and "nope.log" in err


def test_directory_and_usage_errors_exit_2(tmp_path):
    assert sparktui(str(tmp_path), env_dir=tmp_path).returncode == 2
    r = sparktui("--bogus", env_dir=tmp_path)
    assert r.returncode == 2 and b"Traceback" not in r.stderr


def test_in_process_main(clean_env, capsys):
    rc = cli.main(["diagnose", "--json", str(VLLM / "vllm_bad_max_model_len.log")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["findings"][0]["id"] == "cfg.max_model_len_too_big"
    assert out["findings"][0]["captures"]["mml"] == "100000"


def test_in_process_wrapper_only(clean_env, capsys):
    log = clean_env / "w.log"
    log.write_text(
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}\n"
    )
    assert cli.main(["diagnose", str(log)]) == 1
    assert "Root cause not in this log excerpt" in capsys.readouterr().out


def test_benign_only_log_exits_0(clean_env, capsys):
    log = clean_env / "spark.log"
    log.write_text(
        '{"level":"warn","msg":"NVML memory APIs not supported for unified memory '
        'device, falling back to system memory","product_name":"NVIDIA-GB10"}\n'
    )
    assert cli.main(["diagnose", "--json", str(log)]) == 0
    f = json.loads(capsys.readouterr().out)["findings"]
    assert [(x["category"], x["severity"]) for x in f] == [("dgx_spark_gb10", "info")]


CONFIG = """\
nodes:
  - {name: spark-1, host: localhost, role: head}
patterns:
  - id: site.license
    category: model_loading
    role: primary
    title: License server unreachable
    regex: 'FlexLM: cannot reach (?P<server>\\S+)'
    fix: [Check the VPN to the license server]
"""


def test_user_patterns_from_the_config(clean_env, capsys):
    cfg = clean_env / "c.yaml"
    cfg.write_text(CONFIG)
    log = clean_env / "x.log"
    log.write_text("boot\nFlexLM: cannot reach lic01.corp\n")
    assert cli.main(["diagnose", "-c", str(cfg), "--json", str(log)]) == 1
    f = json.loads(capsys.readouterr().out)["findings"][0]
    assert (f["id"], f["line"], f["captures"]["server"]) == ("site.license", 2, "lic01.corp")
    assert f["fix"] == "1. Check the VPN to the license server"


def test_bad_user_pattern_is_a_usage_error_naming_it(clean_env, capsys):
    cfg = clean_env / "c.yaml"
    cfg.write_text(CONFIG.replace("model_loading", "licensing"))
    log = clean_env / "x.log"
    log.write_text("x\n")
    assert cli.main(["diagnose", "-c", str(cfg), str(log)]) == 2
    err = capsys.readouterr().err
    assert "site.license" in err and "category" in err and "c.yaml:4" in err
