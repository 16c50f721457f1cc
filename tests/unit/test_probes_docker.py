"""docker ps JSON parsing, on real `docker ps` captures (tests/fixtures/docker/README.md)."""

from __future__ import annotations

from pathlib import Path

from sparktui.core.probes.docker import DOCKER_PS_ARGV, parse_docker_ps, parse_labels

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "docker"


def test_all_states_from_real_docker_ps_a() -> None:
    containers = parse_docker_ps((FIX / "docker_ps_a_json.txt").read_text())
    by_name = {c.name: c for c in containers}
    assert set(by_name) == {"vllm_node", "paused-one", "vllm-dev", "ray-worker", "node-12345"}
    assert {c.name: c.state for c in containers} == {
        "vllm_node": "running",
        "paused-one": "paused",
        "vllm-dev": "created",
        "ray-worker": "exited",
        "node-12345": "exited",
    }
    assert [c.name for c in containers if c.running] == ["vllm_node"]
    head = by_name["vllm_node"]
    assert head.labels == {"com.example.role": "head", "sparktui.fixture": "1"}
    assert head.command == "sh -c 'sleep 3600'"  # strconv.Quote undone
    assert head.image == "sparktui-capture/busybox:fixture"
    assert len(head.id) == 64 and head.status.startswith("Up ")
    assert by_name["ray-worker"].status.startswith("Exited (3)")
    assert by_name["paused-one"].status.endswith("(Paused)")
    assert by_name["vllm-dev"].created_at.startswith("2026-11-29 ")


def test_running_only_listing() -> None:
    containers = parse_docker_ps((FIX / "docker_ps_running_json.txt").read_text())
    assert {c.name for c in containers} == {"vllm_node", "paused-one"}


def test_noise_lines_are_skipped() -> None:
    real = (FIX / "docker_ps_a_json.txt").read_text()
    noisy = "WARNING: Error loading config file: permission denied\n" + real + "\n{broken\n"
    assert len(parse_docker_ps(noisy)) == len(parse_docker_ps(real)) == 5
    assert parse_docker_ps("") == []
    assert (
        parse_docker_ps("Cannot connect to the Docker daemon at unix:///var/run/docker.sock.") == []
    )


def test_labels_with_commas_in_values() -> None:
    assert parse_labels("a=1,2,b=3") == {"a": "1,2", "b": "3"}
    assert parse_labels("") == {}
    assert parse_labels({"k": "v"}) == {"k": "v"}


def test_the_command_asks_for_no_size() -> None:
    assert "--size=false" in DOCKER_PS_ARGV and "{{json .}}" in DOCKER_PS_ARGV


def test_the_api_listing_reads_as_the_cli_does() -> None:
    """dockerd's /containers/json (what the probe reads through the socket) and `docker ps -a`
    of the same engine at the same moment give the same containers."""
    api = parse_docker_ps((FIX / "containers_json_api.json").read_text())
    cli = parse_docker_ps((FIX / "docker_ps_a_json_same_engine.txt").read_text())
    assert {c.name: c.state for c in api} == {
        "ray-sl10": "running",
        "vllm_exited": "exited",
        "vllm_created": "created",
    }
    for a, c in zip(
        sorted(api, key=lambda x: x.name), sorted(cli, key=lambda x: x.name), strict=True
    ):
        assert (a.name, a.image, a.state, a.id, a.labels) == (
            c.name,
            c.image,
            c.state,
            c.id,
            c.labels,
        )
        assert a.status.split(" ")[0] == c.status.split(" ")[0]  # "Up", "Exited", "Created"
        assert a.created_at[:16] == c.created_at[:16]  # the CLI's form, to the minute
    exited = next(c for c in api if c.name == "vllm_exited")
    assert exited.status.startswith("Exited (3)") and exited.labels == {"role": "test"}


def test_a_broken_api_answer_is_no_containers() -> None:
    assert parse_docker_ps("[{") == [] and parse_docker_ps('[1, "x", {"Names": []}]') == []
