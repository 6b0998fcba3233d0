"""Checks that refuse a run before any worker starts: what would otherwise fail only after minutes.

* the run must fit this machine (check_machine): the model's buffers, its activations and one worker process
  per rank in memory; no more ranks than its cores can carry; a time-out longer than the run can possibly
  take; room on disk for its events (estimates, each named in the message, from lower bounds: a run that
  could fit is never refused);
* the code sites a user names (probes.extra_sites, probes.trace_sites, an intervention's `site`)
  must exist in the installed packages: read from their source without importing them where
  that can tell, else asked of the worker's Python in a subprocess (which imports DeepSpeed);
* intervention options are checked by config/patchsets.resolve (each option as the contract declares it).
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import json
import os
import resource
import shutil
import sys
from pathlib import Path

import psutil

from ..config import torch_alloc_conf
from ..config.scenario import Scenario
from ..contract.answers import ALLOC_CONF_ANSWER, SITES_ANSWER
from ..contract.interventions import DS_PIN_BACKEND_ENV, NATIVE_PIN, PIN_REGISTER, parse
from ..errors import UserError
from ..store import layout
from . import environment
from .ask import Reply, ask

# ZeRO-2 with the optimizer offloaded: fp32 master, fp32 grad, Adam's two states (16 B/param of the whole
# model, partitioned over the ranks) and, per rank, the bf16 model and its H2D staging copy (4 B/param):
# the 20 B/param of live buffers measured on the CPU accelerator with one rank (README, "Findings").
STATE_BYTES_PER_PARAM = 16
PER_RANK_BYTES_PER_PARAM = 4


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f}"


def check_machine(scen: Scenario, where: Path | None = None) -> None:
    """Everything check_memory, check_ranks, check_time and check_disk refuse (`where`: the output directory),
    and a cache root that is not a directory (RSSPROBE_CACHE, XDG_CACHE_HOME, RSSPROBE_ENVS, ...: one line
    naming the variable, before a first run fails on it)."""
    layout.cache_root(), layout.envs_root(), layout.ccache_dir()
    check_memory(scen)
    check_ranks(scen)
    check_time(scen)
    check_disk(scen, where)


# A worker's RSS before its model (Python, torch, DeepSpeed, the process group, the ops): 249.9 MiB measured on
# `tiny` here (torch 2.13.0, DeepSpeed 0.19.8); counted at 200 MiB per rank, below any measured one.
PROCESS_BYTES = 200 * 2**20
# Ranks per core beyond which this machine is not asked to run them: a policy, not a measurement (torchrun
# runs 2 ranks on these 2 cores; 1000 ranks on 2 cores left orphans behind a time-out: README, "Stopping").
RANKS_PER_CORE = 8
# Lower bounds of a run's time, so that a time-out that cannot be met is refused and no other: a worker's
# start (importing torch and DeepSpeed: 1.7 s here, ops loaded at 4.2 s) and a step, which reads and writes
# at least the optimizer's 16 B/param of state (twice) at no more than 100 GB/s (a tiny step took 41 ms here,
# 30 x this bound).
MIN_START_S = 1.0
MIN_STEP_BYTES_PER_PARAM = 32
MAX_BYTES_PER_S = 100e9
# Each step appends an event of ~2.3 KB to events.jsonl (tiny, here); counted at 1 KB.
MIN_STEP_EVENT_BYTES = 1000


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_ranks(scen: Scenario, cores: int | None = None) -> None:
    """UserError when the ranks are more than this machine's cores can carry (RANKS_PER_CORE each)."""
    cores = cores if cores is not None else _cores()
    if scen.world_size > cores * RANKS_PER_CORE:
        raise UserError(f"world_size: {scen.world_size:,} ranks on this machine's {cores} cores (at most "
                        f"{RANKS_PER_CORE} per core: {cores * RANKS_PER_CORE}); several machines: rssprobe prepare")


def _steps(scen: Scenario) -> int:
    """The steps the run makes, as far as known before it: a script's are its --steps, else its own (0 here)."""
    if scen.steps is not None:
        return scen.steps
    return (scen.script.stop_after if scen.script is not None else None) or 0


def check_time(scen: Scenario) -> None:
    """UserError when timeout_s is shorter than the run can possibly take (lower bounds, named)."""
    per_step = scen.model.n_params * MIN_STEP_BYTES_PER_PARAM / MAX_BYTES_PER_S
    least = MIN_START_S + _steps(scen) * per_step
    if scen.timeout_s < least:
        raise UserError(f"timeout_s: {scen.timeout_s:g} s is shorter than this run can take: at least {least:,.1f} s "
                        f"(a worker's start >= {MIN_START_S:g} s, and {_steps(scen):,} steps of "
                        f"{scen.model.n_params:,} params >= {per_step:.2g} s each)")


def check_disk(scen: Scenario, where: Path | None = None) -> None:
    """UserError when the events of every step and rank cannot fit on the output directory's disk."""
    place = Path(where) if where is not None else Path.cwd()
    existing = next((p for p in [place, *place.absolute().parents] if os.path.isdir(p)), None)  # no OSError
    if existing is None:
        return
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return
    need = _steps(scen) * scen.world_size * MIN_STEP_EVENT_BYTES
    if need > free:
        raise UserError(f"steps: {_steps(scen):,} steps x {scen.world_size} ranks write at least {_size(need)} of "
                        f"events; {existing} has {_size(free)} free")


def check_memory(scen: Scenario, total: int | None = None) -> None:
    """UserError when the model's buffers, its activations and a worker process per rank exceed this machine's
    memory, naming the estimate."""
    total = total if total is not None else psutil.virtual_memory().total
    per_param = STATE_BYTES_PER_PARAM + PER_RANK_BYTES_PER_PARAM * scen.world_size
    need = scen.model.n_params * per_param
    processes = PROCESS_BYTES * scen.world_size
    activations, shape, key = _activations(scen)
    if processes + activations + need > total and need <= total:
        key = "world_size" if processes >= activations else key
        raise UserError(f"{key}: {scen.world_size:,} ranks need about {_size(processes)} for their "
                        f"processes ({_size(PROCESS_BYTES)} each) and {_size(activations)} for activations "
                        f"({shape}), beside {_size(need)} of model buffers; this machine has {_size(total)}")
    if need > total:
        key = "model.params" if scen.model.params is not None else "model.layers"
        raise UserError(f"{key}: {scen.model.n_params:,} parameters need about {_size(need)} of host memory "
                        f"({per_param} B/param: {STATE_BYTES_PER_PARAM} of optimizer state plus "
                        f"{PER_RANK_BYTES_PER_PARAM} of bf16 model per rank x {scen.world_size}); "
                        f"this machine has {_size(total)}")


def _activations(scen: Scenario) -> tuple[int, str, str]:
    """A lower bound of the activations of all ranks (bytes), how it was counted, and the key that drives it.

    A forward keeps each layer's input for backward, and backward makes its gradient: 2 per element, per rank.
    The Linear stack: micro_batch x width per layer. A transformers model: micro_batch x seq_len tokens, each
    of hidden_size per layer, and the logits (vocab_size per token) the loss reads; a script's model is its own
    (not estimated)."""
    element = {"bf16": 2, "fp16": 2}.get(scen.precision, 4)
    m, world, batch = scen.model, scen.world_size, scen.micro_batch
    kind = getattr(m, "kind", "linear")
    if kind == "linear":
        return (2 * batch * m.width * (m.n_layers + 1) * element * world,
                f"micro_batch {batch:,} x width {m.width:,} x {m.n_layers + 1} layers", "micro_batch")
    if kind == "transformers":
        resolved = m._resolved or {}
        hidden, vocab, seq = resolved.get("hidden", 0), resolved.get("vocab", 0), m.seq_len or 1
        per_token = 2 * hidden * (m.n_layers + 1) + vocab
        return (batch * seq * per_token * element * world,
                f"micro_batch {batch:,} x seq_len {seq:,} tokens x (2 x hidden_size {hidden:,} x {m.n_layers + 1} "
                f"layers + vocab_size {vocab:,} logits)", "model.seq_len" if seq > batch else "micro_batch")
    return 0, "", "micro_batch"


CAP_IPC_LOCK = 14  # linux/capability.h: mlock without RLIMIT_MEMLOCK's bound
NATIVE_PIN_SINCE = (0, 19, 6)  # DeepSpeed's native pinned backend: PR #8211 (device registration: PR #8283)


def lock_limit(status: str | None = None, soft: int | None = None) -> int | None:
    """Bytes this process may mlock, and so every worker it starts (they inherit its limit and capabilities):
    RLIMIT_MEMLOCK's soft limit (`ulimit -l`), None when there is no bound: RLIM_INFINITY, or CAP_IPC_LOCK in the
    effective set (root has it by default; the kernel then does not count). `status` and `soft` are for tests."""
    if status is None:
        try:
            status = Path("/proc/self/status").read_text()
        except OSError:
            status = ""
    eff = next((line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), None)
    if eff is not None and int(eff, 16) >> CAP_IPC_LOCK & 1:
        return None
    if soft is None:
        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def pins_natively(patches: list[str], env: dict[str, str]) -> bool:
    """The run pins through DeepSpeed's native backend: the ds.native-pin intervention, or the variable set."""
    return any(parse(spec)[0] == NATIVE_PIN for spec in patches) or \
        env.get(DS_PIN_BACKEND_ENV, "").strip().lower() == "native"


def check_patch_pair(patches: list[str], native: bool = False) -> None:
    """UserError for interventions that replace one another: ds.native-pin (or the native backend, `native`) and
    pin.register both decide how DeepSpeed pins. `run` and `estimate` refuse the pair alike."""
    if (native or any(parse(spec)[0] == NATIVE_PIN for spec in patches)) and \
            any(parse(spec)[0] == PIN_REGISTER for spec in patches):
        raise UserError(f"{NATIVE_PIN} and {PIN_REGISTER} both replace how DeepSpeed pins (on "
                        "CUDA pin.register would answer every pin call, the native backend none): give one")


def check_native_pin(scen: Scenario, patches: list[str], env: dict[str, str], ds_version: str | None,
                     limit: int | bool | None = True) -> None:
    """UserError (one line) for a run that pins natively where it cannot: a DeepSpeed without the backend, or a
    lock limit below the most one rank's requests hold at once (each its own pages). mlock failing inside
    DeepSpeed's op aborts the worker (an assert on its null pointer) after minutes; here it is said first, with
    the `ulimit -l` that is needed. `limit` (bytes, None = unbounded) is for tests; a script's model is its own
    and is not sized before it runs (its limit is not checked); `ds_version` None: not known yet (a campaign cell
    whose environment is built when it starts: its release is checked then)."""
    if not pins_natively(patches, env):
        return
    check_patch_pair(patches, native=True)
    if ds_version is not None and torch_alloc_conf.release(ds_version) < NATIVE_PIN_SINCE:
        raise UserError(f"{NATIVE_PIN}: DeepSpeed {ds_version} has no native pinned backend "
                        "(DS_PIN_MEMORY_BACKEND=native, PR #8211, first in 0.19.6)")
    bound = lock_limit() if limit is True else limit
    if bound is None or scen.script is not None:
        return
    from ..analysis import partition
    from ..analysis.summary import ELEMENT_BYTES
    from ..config import modelshape

    shape = modelshape.of(scen)
    zero = partition.zero_of(scen.zero.model_dump(), ELEMENT_BYTES[scen.precision], scen.world_size, "cpu",
                             {"pin_memory": True})
    need = partition.locked_peak(shape, zero)
    if need > bound:
        kib = -(-need // 1024)
        raise UserError(f"{NATIVE_PIN}: each rank mlocks up to {need:,} B ({kib:,} KiB) for DeepSpeed's "
                        f"pinned buffers, but the lock limit is {bound // 1024:,} KiB and this process lacks "
                        f"CAP_IPC_LOCK: run `ulimit -l {kib}` (or more) first")


def user_sites(scen: Scenario, patches: list[str]) -> list[tuple[str, str]]:
    """(where it was given, dotted path) of every site that must exist."""
    out = [("probes.extra_sites", p) for p in scen.probes.extra_sites]
    out += [("probes.trace_sites", p) for p in scen.probes.trace_sites]
    for spec in patches:
        _name, options = parse(spec)
        if "site" in options:
            out.append((f"--patch {spec}", options["site"]))
    return out


def _defined(body: list[ast.stmt]) -> tuple[dict[str, ast.AST], bool]:
    """Names defined at one level of a module or class body; and whether others may exist unseen
    (an import, a star import, a module __getattr__, any assignment we do not follow)."""
    names: dict[str, ast.AST] = {}
    unseen = False
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    unseen = True
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            unseen = True  # definitions under a condition: do not guess
    return names, unseen or "__getattr__" in names


def static_lookup(path: str) -> tuple[bool | None, list[str]]:
    """Whether a dotted path is defined, read from the installed source without importing it:
    True, False (with close names) or None (cannot tell: inherited, imported, dynamic)."""
    parts = path.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None, []
    if spec is None or not spec.submodule_search_locations:
        return None, []
    directory = Path(next(iter(spec.submodule_search_locations)))
    module, i = directory / "__init__.py", 1
    while i < len(parts):
        if (directory / parts[i] / "__init__.py").is_file():
            directory = directory / parts[i]
            module, i = directory / "__init__.py", i + 1
        elif (directory / f"{parts[i]}.py").is_file():
            module, i = directory / f"{parts[i]}.py", i + 1
            break
        else:
            break
    rest = parts[i:]
    if not rest or not module.is_file():
        return None, []
    try:
        body: list[ast.stmt] = ast.parse(module.read_text(encoding="utf-8")).body
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None, []
    prefix = ".".join(parts[:i])
    inherits = False  # inside a class with bases: a name not defined in it may be inherited
    for j, name in enumerate(rest):
        names, unseen = _defined(body)
        node = names.get(name)
        if node is None:
            if unseen or inherits:
                return None, []
            close = difflib.get_close_matches(name, list(names), n=5)
            return False, [".".join([prefix, *rest[:j], c]) for c in close]
        if j == len(rest) - 1:
            return True, []
        if not isinstance(node, ast.ClassDef):
            return None, []
        inherits = any(not (isinstance(b, ast.Name) and b.id == "object") for b in node.bases) or bool(node.keywords)
        body = node.body
    return None, []


_ASK = """
import json, sys
from rssprobe.contract.answers import SITES_ANSWER
from rssprobe.worker.sites import SiteError, close_names, resolve
out = {}
for path in json.loads(sys.argv[1]):
    try:
        found = resolve(path)
    except SiteError as e:
        out[path] = str(e)
        continue
    except Exception as e:
        continue  # cannot tell here; the worker will say
    if found is None:
        near = close_names(path)
        out[path] = "does not exist in the installed packages" + (f"; close names: {', '.join(near)}" if near else "")
print(SITES_ANSWER + json.dumps(out))
"""


def _ask_python(python: str, paths: list[str]) -> dict[str, str]:
    """path -> why it is missing, by resolving the paths in the worker's Python (imports them)."""
    return ask(python, ["-c", _ASK, json.dumps(paths)], SITES_ANSWER, environment.probe(python)).answer or {}


@functools.lru_cache(maxsize=32)
def check_alloc_conf(conf: str | None, python: str = sys.executable) -> None:
    """UserError (one line) unless the worker's torch accepts `conf` as PYTORCH_CUDA_ALLOC_CONF: torch itself is
    asked (its own error message); a CPU build's unparsed keys are judged by the CUDA-only keys of its release."""
    if conf is None:
        return
    flag = f"--torch-alloc-conf {conf}"
    try:
        keys = torch_alloc_conf.split(conf)
    except ValueError as e:
        raise UserError(f"{flag}: {e}") from None
    reply = _torch_reply(conf, tuple(keys), python)
    answer = reply.answer
    if not isinstance(answer, dict):
        why = reply.why or "not a JSON object"
        raise UserError(f"{flag}: could not ask {python}'s torch how it parses the setting ({why})")
    if answer["error"]:
        raise UserError(f"{flag}: torch {answer['build']} refuses it: {answer['error']} (torch's own words)")
    if not (answer["cuda_build"] and answer["parser"]):  # a CUDA build parsed all of it; a CPU build its share
        for key in keys:
            if not (answer["known"] or {}).get(key):
                why = torch_alloc_conf.cuda_only_verdict(key, answer["torch"])
                if why:
                    raise UserError(f"{flag}: {why}")
    _check_values(conf, answer["torch"])


@functools.lru_cache(maxsize=32)
def _torch_reply(conf: str, keys: tuple[str, ...], python: str) -> Reply:
    """What `python`'s torch says of `conf`, asked once a process (a subprocess that imports torch, ~1.5 s of CPU):
    check_alloc_conf's own cache keeps only the settings it passes, and every command of a campaign, a cell or a
    test that refuses the same setting would ask again."""
    return ask(python, ["-m", "rssprobe.worker.allocconf", conf, json.dumps(list(keys))],
               ALLOC_CONF_ANSWER, environment.alloc_conf_probe(python))


def _check_values(conf: str, torch_version: str | None) -> None:
    """What torch would misread (stoull takes -5 as 2^64 - 5) or a CPU build does not parse at all (the CUDA-only
    keys' values), and a combination the release is unsafe with (pytorch PR #192722): rssprobe/data/
    torch_alloc_conf.toml's [values] and [fixes]."""
    try:
        torch_alloc_conf.check(conf, torch_version)
    except ValueError as e:
        raise UserError(f"--torch-alloc-conf {conf}: {e}") from None


def check_alloc_conf_for(conf: str | None, torches: list[str | None], python: str | None = None) -> None:
    """check_alloc_conf for every torch a campaign's cells run: this Python's (None, or `python`) is asked; a
    torch release whose environment is not built yet is judged from the table alone (its CUDA-only keys, every
    value, the fixes), and asked again when its cell starts (run/launch.prepare)."""
    if conf is None:
        return
    for version in dict.fromkeys(torches or [None]):
        if version is None:
            check_alloc_conf(conf, python or sys.executable)
            continue
        try:
            keys = torch_alloc_conf.split(conf)
        except ValueError as e:
            raise UserError(f"--torch-alloc-conf {conf}: {e}") from None
        for key in keys:
            if key in torch_alloc_conf.cuda_only_keys():
                why = torch_alloc_conf.cuda_only_verdict(key, version)
                if why:
                    raise UserError(f"--torch-alloc-conf {conf}: {why}")
        _check_values(conf, version)


def check_sites(scen: Scenario, patches: list[str], python: str = sys.executable, overlay: bool = False) -> None:
    """UserError naming the first user-given site that does not exist (with the close names)."""
    wanted = user_sites(scen, patches)
    if not wanted or overlay:  # a patch file may add a function: the worker decides then
        return
    undecided = []
    for where, path in wanted:
        found, close = static_lookup(path) if python == sys.executable else (None, [])
        if found is False:
            hint = f"; close names: {', '.join(close)}" if close else ""
            raise UserError(f"{where}: site {path!r} does not exist in the installed packages{hint}")
        if found is None:
            undecided.append((where, path))
    if undecided:
        missing = _ask_python(python, [p for _w, p in undecided])
        for where, path in undecided:
            if path in missing:
                raise UserError(f"{where}: site {path!r} {missing[path]}"
                                if missing[path].startswith("does not") else f"{where}: {missing[path]}")
