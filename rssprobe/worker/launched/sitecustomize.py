"""rssprobe's hook in every Python process of a run started by the user's own launcher
(`rssprobe run -- deepspeed|torchrun|accelerate launch|python ... train.py ARGS`).

rssprobe puts this file's directory first on PYTHONPATH, so every Python the launcher starts imports it at
start-up, on this node and, through the `deepspeed` launcher, on others: that launcher forwards PYTHONPATH and
every variable whose name starts with PYTHON, which is why the run is named in PYTHON_RSSPROBE_RUN. A process
whose main script is the training script (PYTHON_RSSPROBE_SCRIPT) is a rank: it re-executes itself, same pid
and interpreter flags, as `python -m rssprobe.worker --launched RUN_DIR ARGS...`, which imports torch and
DeepSpeed, takes its baseline and runs the script as __main__ under the probes, writing this rank's files into
the one run directory. Every other process (the launcher itself, its helpers, the worker after the re-exec)
continues untouched. A sitecustomize the user already had is run after this one.
"""

import os
import sys

RUN = "PYTHON_RSSPROBE_RUN"
SCRIPT = "PYTHON_RSSPROBE_SCRIPT"
OPS = "PYTHON_RSSPROBE_OPS"  # the compiled-ops cache, for nodes the launcher does not give TORCH_EXTENSIONS_DIR


def rank_command(environ: dict[str, str], argv: list[str], orig_argv: list[str], executable: str) -> list[str] | None:
    """The command this process re-executes as when it is a rank of the run (its main script is the training
    script); None for every other process (the launcher, a helper, a data worker)."""
    run, script = environ.get(RUN), environ.get(SCRIPT)
    if not run or not script or not argv or not argv[0] or not os.path.isfile(argv[0]):
        return None
    if os.path.realpath(argv[0]) != os.path.realpath(script):
        return None
    # the interpreter's own options (-u, -X ...) as this process was started, before the script
    flags = orig_argv[1:orig_argv.index(argv[0], 1)] if argv[0] in orig_argv[1:] else []
    return [executable, *flags, "-m", "rssprobe.worker", "--launched", run, *argv[1:]]


def _take_over() -> None:
    command = rank_command(dict(os.environ), list(getattr(sys, "argv", None) or []),
                           list(getattr(sys, "orig_argv", [])), sys.executable)
    if command is None:
        return
    if os.environ.get(OPS):
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.environ[OPS])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def _chain() -> None:
    """Run the sitecustomize this one shadows (the next on sys.path), if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.abspath(entry or ".") != here and os.path.isfile(candidate):
            with open(candidate, "rb") as f:
                code = compile(f.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})
            return


if __name__ == "sitecustomize":  # at interpreter start-up (imported as a module, e.g. by a test: nothing)
    _take_over()
    _chain()
