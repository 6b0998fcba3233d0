"""DeepSpeed's two CPU ops (cpu_adam, deepspeed_shm_comm) built for a Python ahead of its first run, both at once.

A first run on a new machine otherwise JIT-compiles them one after the other inside its worker (~3 minutes on 2
cores, the longest part of a first `make demo`). Built here, into the very cache directory a worker of that
Python uses (host.ops_cache_dir) and with the same compiler settings (environment.worker: ccache where the
environment has it), later workers load them in seconds. `make install` starts this in the background as soon
as torch and DeepSpeed are installed, while pip installs the rest:

    PYTHONPATH=. .venv/bin/python -m rssprobe.run.opbuild [--python PATH]

Only the standard library and rssprobe's stdlib-only modules are imported here (rssprobe's own dependencies may
not be installed yet); each op builds in a process of its own. Exit 0 when both load, 1 otherwise (the first
run then compiles what is missing, as without this step).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable

from ..contract.environment import SHARED_OPS_ENV
from . import environment, host

# the op's name in the cache -> how the worker loads it on the CPU accelerator (worker/training.py, through
# worker/opreuse.py: a library of the same build key, built by another environment, is loaded instead of compiled;
# one built here is kept for the others)
OPS = {
    "cpu_adam": ("from rssprobe.worker import opreuse; from deepspeed.ops.op_builder import CPUAdamBuilder; "
                 "print('cpu_adam', opreuse.load(CPUAdamBuilder()))"),
    "deepspeed_shm_comm": ("from rssprobe.worker import opreuse; from deepspeed.accelerator import get_accelerator; "
                           "print('deepspeed_shm_comm', "
                           "opreuse.load(get_accelerator().create_op_builder('ShareMemCommBuilder')))"),
}


def build(python: str, say: Callable[[str], None] = print) -> bool:
    """Build every op of OPS for `python`, concurrently; True when each loads."""
    torch_v, ds_v = host.package_version("torch", python), host.package_version("deepspeed", python)
    if torch_v is None or ds_v is None:
        say(f"rssprobe opbuild: {python} has no {'torch' if torch_v is None else 'deepspeed'}; nothing built")
        return False
    env = {**environment.worker(python, 1, "glibc", {}, torch_v, ds_v), "DS_ACCELERATOR": "cpu"}
    started = time.monotonic()
    procs = {op: subprocess.Popen([python, "-c", code], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for op, code in OPS.items()}
    ok, how = True, []
    for op, proc in procs.items():
        out, _ = proc.communicate()
        if proc.returncode != 0:
            ok = False
            say(f"rssprobe opbuild: {op} did not build (exit {proc.returncode}): "
                f"{(out.strip().splitlines() or ['no output'])[-1][:300]}")
        else:  # "cpu_adam reused" (from the shared directory, not compiled) or "cpu_adam loaded" (built here)
            how.append(next((line for line in reversed(out.splitlines()) if line.startswith(f"{op} ")), op))
    say(f"rssprobe opbuild: {', '.join(how) or 'nothing'} {'ready' if ok else 'not all ready'} "
        f"(own build directory: {env['TORCH_EXTENSIONS_DIR']}; shared: {env.get(SHARED_OPS_ENV) or 'off'}) "
        f"({time.monotonic() - started:.0f} s)")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rssprobe.run.opbuild", description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=sys.executable, help="The worker's Python (default: this one).")
    return 0 if build(parser.parse_args(argv).python) else 1


if __name__ == "__main__":
    sys.exit(main())
