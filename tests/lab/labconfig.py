"""The sparktui config a lab writes for itself (the keys of issue 2)."""

from __future__ import annotations

import yaml

from tests.lab.ray import EXTRA_ARGS, RUN_ARGS
from tests.lab.state import IC_IF, Lab


def config_dict(lab: Lab) -> dict:
    return {
        "cluster": {"name": "lab"},
        "ssh": {
            "user": "root",
            "identity_file": str(lab.key_path),
            "known_hosts": str(lab.known_hosts),
        },
        "nodes": [
            {"name": n.name, "host": n.ext_ip, "ip": n.ic_ip, "role": n.role} for n in lab.nodes
        ],
        "container": {
            "name": lab.container,
            "image": lab.image or "sparklab/ray",
            "run_args": list(RUN_ARGS),
            "env": {"NCCL_SOCKET_IFNAME": IC_IF, "GLOO_SOCKET_IFNAME": IC_IF},
        },
        "ray": {"port": lab.ray_port, "extra_args": list(EXTRA_ARGS)},
    }


def write(lab: Lab) -> None:
    text = (
        f"# sparktui config of lab {lab.id} (written by `python -m tests.lab up`; pin={lab.pin})\n"
    )
    text += yaml.safe_dump(config_dict(lab), sort_keys=False, default_flow_style=None, width=100)
    lab.config_path.write_text(text)
