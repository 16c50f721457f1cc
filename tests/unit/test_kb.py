"""The knowledge base: shipped data is complete and valid; bad patterns fail loudly."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparktui import config as config_mod
from sparktui.knowledge import kb as kb_mod
from sparktui.knowledge.kb import CATEGORIES, KnowledgeBaseError, load, load_builtin
from sparktui.knowledge.matcher import Matcher

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# crash_taxonomy.md Appendix A: every signature id and its category.
APPENDIX = [
    ("pg.no_node_type", "placement_group_ip_mismatch"),
    ("pg.waiting_specs_node", "placement_group_ip_mismatch"),
    ("pg.waiting_specs_any", "placement_group_ip_mismatch"),
    ("pg.pending_demands", "placement_group_ip_mismatch"),
    ("pg.unique_ip", "placement_group_ip_mismatch"),
    ("pg.driver_not_in_pg", "placement_group_ip_mismatch"),
    ("ray.worker_died", "ray_worker_died_segfault"),
    ("ray.exit_system_error", "ray_worker_died_segfault"),
    ("ray.actor_died", "ray_worker_died_segfault"),
    ("sig.sigsegv_ray", "ray_worker_died_segfault"),
    ("sig.fatal_segv", "ray_worker_died_segfault"),
    ("sig.pc_frame", "ray_worker_died_segfault"),
    ("nccl.unhandled_system", "nccl_error"),
    ("nccl.unhandled_cuda", "nccl_error"),
    ("nccl.internal", "nccl_error"),
    ("nccl.remote", "nccl_error"),
    ("nccl.warn", "nccl_error"),
    ("nccl.ibv_enomem", "nccl_error"),
    ("nccl.ibv_modify_qp", "nccl_error"),
    ("nccl.watchdog_timeout", "nccl_error"),
    ("nccl.bootstrap_if", "nccl_error"),
    ("nccl.transport", "nccl_error"),
    ("nccl.init_device_wrapper", "nccl_error"),
    ("gloo.fullmesh", "gloo_error"),
    ("gloo.loopback", "gloo_error"),
    ("gloo.remote_loopback", "gloo_error"),
    ("gpu.required_exceeds_pg", "not_enough_gpus"),
    ("gpu.no_gpu_current_node", "not_enough_gpus"),
    ("gpu.local_world_size", "not_enough_gpus"),
    ("gpu.tp_gt_available", "not_enough_gpus"),
    ("gpu.world_gt_local", "not_enough_gpus"),
    ("gpu.driver_no_gpu", "not_enough_gpus"),
    ("gpu.tp_exceeds_warn", "not_enough_gpus"),
    ("oom.cuda", "cuda_oom_kv_cache"),
    ("oom.free_mem_startup", "cuda_oom_kv_cache"),
    ("kv.max_seq_len", "cuda_oom_kv_cache"),
    ("kv.serve_one_request", "cuda_oom_kv_cache"),
    ("kv.no_memory_blocks", "cuda_oom_kv_cache"),
    ("kv.zero_blocks", "cuda_oom_kv_cache"),
    ("kv.negative_avail", "cuda_oom_kv_cache"),
    ("gcs.connect", "ray_gcs_version"),
    ("gcs.cluster_id_timeout", "ray_gcs_version"),
    ("gcs.node_not_found", "ray_gcs_version"),
    ("gcs.version_mismatch", "ray_gcs_version"),
    ("gcs.no_instance", "ray_gcs_version"),
    ("gcs.failed_start", "ray_gcs_version"),
    ("gcs.local_ip_loopback", "ray_gcs_version"),
    ("arch.no_kernel_image", "cuda_arch_driver_mismatch"),
    ("arch.sm_header_missing", "cuda_arch_driver_mismatch"),
    ("arch.sm_header_missing2", "cuda_arch_driver_mismatch"),
    ("arch.driver_too_old", "cuda_arch_driver_mismatch"),
    ("arch.err804", "cuda_arch_driver_mismatch"),
    ("arch.not_compatible", "cuda_arch_driver_mismatch"),
    ("arch.unspecified_launch", "cuda_arch_driver_mismatch"),
    ("arch.gb10_cc_warning", "cuda_arch_driver_mismatch"),
    ("shm.ray_object_store_tmp", "shm_docker"),
    ("shm.sigbus", "shm_docker"),
    ("shm.nccl_segment", "shm_docker"),
    ("shm.ncclshmopen", "shm_docker"),
    ("shm.broadcast_block", "shm_docker"),
    ("model.arch_not_supported", "model_loading"),
    ("model.arch_failed_inspect", "model_loading"),
    ("model.undefined_symbol", "model_loading"),
    ("model.trust_remote_code", "model_loading"),
    ("model.gated", "model_loading"),
    ("model.remote_download", "model_loading"),
    ("model.gds", "model_loading"),
    ("model.load_model_wrapper", "model_loading"),
    ("eng.core_init_failed", "engine_startup"),
    ("eng.core_failed_start", "engine_startup"),
    ("eng.workerproc_init_failed", "engine_startup"),
    ("eng.pg_timeout", "engine_startup"),
    ("eng.fatal_signal_workers", "engine_startup"),
    ("eng.ray_shutdown_notice", "engine_startup"),
    ("port.errno98", "port_in_use"),
    ("port.eaddrinuse", "port_in_use"),
    ("port.owner_debug", "port_in_use"),
    ("port.raylet_grpc", "port_in_use"),
    ("docker.name_conflict", "docker_container_conflict"),
    ("docker.rm_no_args", "docker_container_conflict"),
    ("spark.ray_oom_monitor", "dgx_spark_gb10"),
    ("spark.nvml_not_supported", "dgx_spark_gb10"),
    ("spark.nv_err_no_memory", "dgx_spark_gb10"),
    ("spark.ninja_fail", "dgx_spark_gb10"),
    ("spark.uma_total", "dgx_spark_gb10"),
    ("spark.gb10_name", "dgx_spark_gb10"),
]


def test_builtin_has_every_taxonomy_signature_in_its_category():
    kb = load_builtin()
    assert len(APPENDIX) == 86
    for pid, category in APPENDIX:
        assert pid in kb.by_id, pid
        assert kb.by_id[pid].category == category, pid


def test_every_category_is_described_and_has_a_root_cause_pattern():
    kb = load_builtin()
    assert set(kb.categories) == {*CATEGORIES, "unknown"} and len(CATEGORIES) == 14
    for name in CATEGORIES:
        roles = {p.role for p in kb.patterns if p.category == name}
        assert "primary" in roles, name
        c = kb.categories[name]
        assert c.fix and c.links and c.explanation and c.title


def test_every_pattern_has_fix_links_and_compiled_regexes():
    for p in load_builtin().patterns:
        assert p.fix and all(s.strip() for s in p.fix), p.id
        assert p.links and all(u.startswith("https://") for u in p.links), p.id
        assert p.compiled and len(p.compiled) == len(p.regexes), p.id
        assert p.role in kb_mod.ROLES and p.severity in kb_mod.SEVERITIES
        if p.role == "benign":
            assert p.severity == "info", p.id


def test_every_taxonomy_example_line_is_matched_by_its_pattern():
    """The verbatim example of each signature (crash_taxonomy.md) hits the same id."""
    examples = yaml.safe_load((FIXTURES / "crash_signature_examples.yaml").read_text())
    assert len(examples) >= 80
    m = Matcher(load_builtin())
    for e in examples:
        ids = {h.id for h in m.scan_text(e["example"])}
        assert e["id"] in ids, (e["id"], e["example"][:120])


def test_messages_fill_captures_and_drop_optional_parts():
    kb = load_builtin()
    p = kb.by_id["port.errno98"]
    assert p.render_message({"port": "8000"}) == "Address already in use (port 8000)"
    assert p.render_message({}) == "Address already in use"
    no_node = kb.by_id["pg.no_node_type"]
    assert "node:10.0.0.1" in no_node.render_message({"ip": "10.0.0.1"})


# --- validation ----------------------------------------------------------------------------


def _err(patterns, **kw) -> str:
    with pytest.raises(KnowledgeBaseError) as ei:
        load(patterns, source="my.yaml", line=7, **kw)
    return str(ei.value)


def test_bad_category_names_pattern_and_field():
    msg = _err([{"id": "mine", "category": "gpu_on_fire", "regex": "x"}])
    assert "my.yaml:7" in msg and "'mine'" in msg and "'category'" in msg
    assert "gpu_on_fire" in msg


def test_bad_regex_names_pattern_field_and_regex():
    msg = _err([{"id": "broken", "category": "nccl_error", "regex": ["ok", "(unclosed"]}])
    assert "'broken'" in msg and "'regex'" in msg and "(unclosed" in msg


@pytest.mark.parametrize(
    "item, field",
    [
        ({"role": "boss"}, "role"),
        ({"severity": "fatal"}, "severity"),
        ({"regex": []}, "regex"),
        ({"regex": 42}, "regex"),
        ({"span": 99}, "span"),
        ({"span": True}, "span"),
        ({"fix": []}, "fix"),
        ({"fix": [""]}, "fix"),
        ({"links": ["ftp://x"]}, "links"),
        ({"colour": "red"}, "colour"),
        ({"message": "port {port}"}, "message"),
        ({"anchor": "("}, "anchor"),
        ({"silent": True}, "silent"),
        ({"role": "benign", "severity": "error"}, "severity"),
        ({"enabled": "no"}, "enabled"),
    ],
)
def test_bad_field_is_named(item, field):
    pattern = {"id": "p1", "category": "nccl_error", "regex": "boom", **item}
    msg = _err([pattern])
    assert "'p1'" in msg and f"'{field}'" in msg


def test_bad_id_and_duplicates():
    assert "'id'" in _err([{"id": "has space", "category": "nccl_error", "regex": "x"}])
    assert "pattern #1" in _err(["just a string"])
    dup = [{"id": "a", "category": "nccl_error", "regex": "x"}] * 2
    assert "duplicate" in _err(dup)


def test_missing_regex_for_a_new_pattern():
    assert "'regex'" in _err([{"id": "new.one", "category": "nccl_error"}])


def test_rules_referring_to_unknown_patterns_fail():
    base = kb_mod._read_builtin()  # patterns.yaml plus patterns/*.yaml
    base["rules"] = [{"id": "r1", "when": ["no.such.pattern"], "demote": ["nccl_error"]}]
    with pytest.raises(KnowledgeBaseError, match="rule 'r1'.*'when'.*no.such.pattern"):
        load(base=base)


# --- user patterns -------------------------------------------------------------------------


def test_user_adds_a_pattern_with_category_defaults():
    kb = load(
        [
            {
                "id": "my.oom",
                "category": "cuda_oom_kv_cache",
                "regex": r"MyApp OOM at (?P<where>\S+)",
                "message": "OOM at {where}",
            }
        ]
    )
    p = kb.by_id["my.oom"]
    assert p.role == "primary" and p.severity == "error"
    assert p.fix == kb.categories["cuda_oom_kv_cache"].fix  # inherited
    assert p.origin == "config"
    hits = Matcher(kb).scan_text("noise\nMyApp OOM at layer7\n")
    assert [(h.id, h.line, h.captures["where"]) for h in hits] == [("my.oom", 2, "layer7")]


def test_user_overrides_a_shipped_pattern_by_id():
    kb = load(
        [
            {"id": "gpu.tp_exceeds_warn", "severity": "error", "role": "primary"},
            {"id": "arch.sm_header_missing2", "enabled": False},
            {"id": "gcs.failed_start", "regexes": ["GCS went away"]},
        ]
    )
    p = kb.by_id["gpu.tp_exceeds_warn"]
    assert (p.role, p.severity) == ("primary", "error")
    assert p.regexes == load_builtin().by_id["gpu.tp_exceeds_warn"].regexes
    assert "arch.sm_header_missing2" not in kb.by_id
    assert kb.by_id["gcs.failed_start"].regexes == ("GCS went away",)
    m = Matcher(kb)
    assert [h.id for h in m.scan_text("GCS went away\n")] == ["gcs.failed_start"]
    assert [
        h
        for h in m.scan_text("RuntimeError: Failed to start GCS.\n")
        if h.pattern.role not in ("fallback", "signal")
    ] == []


def test_user_patterns_from_a_config_file_report_file_and_line(tmp_path):
    text = (
        "nodes:\n"
        "  - {name: spark-1, host: localhost, role: head}\n"
        "patterns:\n"
        "  - id: bad.one\n"
        "    category: nccl_error\n"
        "    regex: ['[unclosed']\n"
    )
    cfg = config_mod.parse(text, file="cluster.yaml")
    assert cfg.patterns_line == 4
    with pytest.raises(KnowledgeBaseError) as ei:
        kb_mod.load_for_config(cfg)
    assert "cluster.yaml:4" in str(ei.value) and "'bad.one'" in str(ei.value)


def test_no_user_patterns_gives_the_shipped_kb():
    cfg = config_mod.local_default()
    assert kb_mod.load_for_config(cfg) is load_builtin()
