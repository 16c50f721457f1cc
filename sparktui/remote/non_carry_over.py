# Runs inside a node's container (`docker exec <c> python3 -c "$text" NAME...`, from
# restart): adds NAME... to $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json (default
# ~/.config/vllm/, as vLLM's envs.py resolves it), keeping the names already there, so the
# head's vLLM does not copy its own values of them onto the Ray workers. Prints the path
# and the list written. Standard library only, Python 3.7 syntax.
import json
import os
import sys


def main():
    root = os.environ.get("VLLM_CONFIG_ROOT") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"),
        "vllm",
    )
    root = os.path.expanduser(root)
    path = os.path.join(root, "ray_non_carry_over_env_vars.json")
    names = set(sys.argv[1:])
    try:
        with open(path) as f:
            old = json.load(f)
        if isinstance(old, list):
            names.update(str(x) for x in old)
    except (OSError, ValueError):
        pass
    os.makedirs(root, exist_ok=True)
    tmp = path + ".sparktui.tmp"
    with open(tmp, "w") as f:
        json.dump(sorted(names), f)
        f.write("\n")
    os.replace(tmp, path)
    print(path, json.dumps(sorted(names)))


if __name__ == "__main__":
    main()
