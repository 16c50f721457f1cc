# Runs inside the head's Ray container: `python3 -c "$RAY_NODES"` (probe.sh, ray_table.sh).
# Prints exactly one sentinel line (nodes JSON, or an error string as JSON) whatever else Ray
# writes, and exits 0 without waiting on Ray's shutdown hooks. address="auto" honours
# RAY_ADDRESS when set. Parsed by sparktui.core.probes.ray.parse_ray_nodes.
# With the argument `pending` (the probe), two more sentinel lines, each on its own: the
# placement groups straight from the GCS (`ray.util.placement_group_table()`, no dashboard
# needed) and the text `ray status` prints (its Pending Demands), each JSON, or its own
# error line; parsed by sparktui.core.probes.ray_pending. The head's clock comes with the PGs.
import json
import logging
import os
import sys
import time


def _out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _pgs():
    import ray

    return {"now": time.time(), "pgs": ray.util.placement_group_table()}


def _status():
    # what `ray status` does (ray/scripts/scripts.py::status), on the driver's GCS client
    import ray
    from ray._private import ray_constants
    from ray.autoscaler._private.commands import debug_status
    from ray.experimental import internal_kv

    status = internal_kv._internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS)
    error = internal_kv._internal_kv_get(ray_constants.DEBUG_AUTOSCALING_ERROR)
    address = ray.get_runtime_context().gcs_address
    return debug_status(status, error, address=address)


def _part(sentinel, fn):
    try:
        data = fn()
    except BaseException as e:
        _out(sentinel + "_ERROR@@" + json.dumps(f"{type(e).__name__}: {e}"))
    else:
        _out(sentinel + "@@" + json.dumps(data, default=str))


def main(args):
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray

        ray.init(address="auto", logging_level=logging.ERROR, log_to_driver=False)
        nodes = ray.nodes()
    except BaseException as e:
        _out("@@RAY_ERROR@@" + json.dumps(f"{type(e).__name__}: {e}"))
    else:
        _out("@@NODES@@" + json.dumps(nodes, default=str))
        if "pending" in args:
            _part("@@PGS", _pgs)
            _part("@@STATUS", _status)
        try:
            ray.shutdown()
        except BaseException:
            pass
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
