# Runs inside the head's Ray container: `python3 -c "$RAY_NODES"` (probe.sh, ray_table.sh).
# Prints exactly one sentinel line (nodes JSON, or an error string as JSON) whatever else Ray
# writes, and exits 0 without waiting on Ray's shutdown hooks. address="auto" honours
# RAY_ADDRESS when set. Parsed by sparktui.core.probes.ray.parse_ray_nodes.
import json
import logging
import os
import sys


def _out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray

        ray.init(address="auto", logging_level=logging.ERROR, log_to_driver=False)
        nodes = ray.nodes()
    except BaseException as e:
        _out("@@RAY_ERROR@@" + json.dumps(f"{type(e).__name__}: {e}"))
    else:
        _out("@@NODES@@" + json.dumps(nodes, default=str))
        try:
            ray.shutdown()
        except BaseException:
            pass
    os._exit(0)


if __name__ == "__main__":
    main()
