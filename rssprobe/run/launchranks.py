"""How many ranks a user's launch command asks for (`rssprobe run -- LAUNCHER ... train.py ARGS`).

A launcher that is not told to distribute can start fewer processes than its command names: `accelerate launch
--num_processes 2 train.py` without `--multi_gpu` (and no config that says so) runs one plain process on a
machine without GPUs. rssprobe gives a launched script a one-process rendezvous, so that process would train as
one rank and the run would look fine; each rank therefore compares the world it got with the one asked for here
(worker/__main__.py), and a mismatch fails the run before training with one line naming both numbers.

Only the launcher's own options are read (the words before the script); None where the command does not say
(a count of "auto", an elastic range, a hostfile filtered by --include/--exclude, an unknown launcher).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..contract.environment import RANKS_ENV
from ..contract.files import MAX_WORLD_SIZE
from ..errors import UserError


def _options(words: list[str]) -> dict[str, str]:
    """--name value / --name=value / -n value pairs (the last one given wins; a bare flag maps to "")."""
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            name, eq, value = word.partition("=")
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value, i = words[i + 1], i + 1
            out[name.replace("_", "-")] = value
        i += 1
    return out


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() and int(value) > 0 else None


def hostfile_slots(path: str) -> int | None:
    """The slots a DeepSpeed/MPI hostfile lists (`host slots=N` a line; comments and blanks skipped)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    total = 0
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        slots = next((w.partition("=")[2] for w in line.split()[1:] if w.startswith("slots=")), "1")
        n = _count(slots)
        if n is None:
            return None
        total += n
    return total or None


def _launcher(before: list[str]) -> str | None:
    words = [os.path.basename(w) for w in before]
    if "accelerate" in words or "accelerate.commands.launch" in before:
        return "accelerate"
    if {"torchrun", "torch.distributed.run", "torch.distributed.launch"} & set(words):
        return "torchrun"
    if "deepspeed" in words or "deepspeed.launcher.runner" in before:
        return "deepspeed"
    if {"mpirun", "mpiexec", "srun"} & set(words):
        return "mpi"
    return None


def requested(command: list[str], script: str) -> tuple[int, str] | None:
    """(ranks the command asks for, the launcher's name) from the words before `script`; None when it does not say."""
    before = command[:command.index(script)] if script in command else command
    launcher = _launcher(before)
    opts = _options(before)
    if launcher == "accelerate":
        n = _count(opts.get("--num-processes"))
        return (n, launcher) if n else None
    if launcher == "torchrun":
        per_node = _count(opts.get("--nproc-per-node", "1"))
        nodes = _count(opts.get("--nnodes", "1"))  # an elastic range "1:2" is not a count
        return (per_node * nodes, launcher) if per_node and nodes else None
    if launcher == "deepspeed":
        if "--include" in opts or "--exclude" in opts:
            return None
        gpus = _count(opts.get("--num-gpus") or opts.get("--num-accelerators"))
        nodes = _count(opts.get("--num-nodes"))
        hostfile = opts.get("-H") or opts.get("--hostfile")
        if hostfile and not gpus:
            slots = hostfile_slots(hostfile)
            return (slots, launcher) if slots else None
        if gpus:
            return (gpus * (nodes or 1), launcher)
        return None
    if launcher == "mpi":
        n = _count(opts.get("-np") or opts.get("-n") or opts.get("--ntasks"))
        return (n, launcher) if n else None
    return None


def environment(command: list[str], script: str) -> dict[str, str]:
    """The variable that tells each launched rank the world its command asks for (contract.RANKS_ENV), empty when
    the command does not say; a count rssprobe cannot record is refused here, before anything starts."""
    asked = requested(command, script)
    if asked is None:
        return {}
    if asked[0] > MAX_WORLD_SIZE:
        raise UserError(f"{' '.join(command)}: asks for {asked[0]:,} ranks, more than rssprobe records "
                        f"({MAX_WORLD_SIZE:,})")
    return {RANKS_ENV: f"{asked[0]} {asked[1]}"}
