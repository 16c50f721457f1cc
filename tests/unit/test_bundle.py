"""The bundle's masking and framing (the real thing runs in tests/e2e/test_lifecycle_vllm_lab.py)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from sparktui import config
from sparktui.core.bundle import Bundle, mask_config, mask_text, split_files

ROOT = Path(__file__).resolve().parents[2]


def test_mask_text_and_config() -> None:
    assert (
        mask_text("HF_TOKEN=hf_abc python3 -m vllm --api-key sk-1 --port 8000")
        == "HF_TOKEN=**** python3 -m vllm --api-key **** --port 8000"
    )
    cfg = config.load(str(ROOT / "config.example.yaml"))
    cfg.container.env["HF_TOKEN"] = "hf_secret"
    cfg.vllm.args = [*cfg.vllm.args, "--api-key", "sk-secret"]
    dumped = repr(mask_config(cfg.model_dump(mode="json")))
    assert "hf_secret" not in dumped and "sk-secret" not in dumped
    assert "'HF_TOKEN': '****'" in dumped
    assert "'strict_host_key_checking': True" in dumped  # not a secret value: kept


def test_split_files_and_archive(tmp_path: Path) -> None:
    out = (
        "\n@@sparktui:file node.txt@@\nLinux spark-2\ndocker 20.10.24\n"
        "\n@@sparktui:file ray/worker-ab-01000000-136.err@@\nSegmentation fault\n"
        "\n@@sparktui:end@@\n"
    )
    files = split_files(out)
    assert files == {
        "node.txt": "Linux spark-2\ndocker 20.10.24\n",
        "ray/worker-ab-01000000-136.err": "Segmentation fault\n",
    }
    b = Bundle("sparktui-bundle-x")
    b.add_json("status.json", {"ok": True})
    b.files["logs/spark-2/node.txt"] = files["node.txt"].encode()
    b.write(str(tmp_path / "b.tar.gz"))
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        names = sorted(tar.getnames())
        data = tar.extractfile("sparktui-bundle-x/status.json")
        assert data is not None and b'"ok": true' in io.BytesIO(data.read()).getvalue()
    assert names == ["sparktui-bundle-x/logs/spark-2/node.txt", "sparktui-bundle-x/status.json"]
