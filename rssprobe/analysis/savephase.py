"""The checkpoint load and the saves of a target, from a small CPU calibration that loads and saves, carried to the
target's accelerator by a stated rule (issue 41 item 3). Pure arithmetic.

Field jobs run out of host RAM while they load and while they save (ms-swift #6473 and #8193, LLaMA-Factory #9258),
and a calibration measured on a GPU (the packaged H200 sweep) neither loads nor saves. These phases are measured in a
CPU sweep of a transformers model that loads its checkpoint with from_pretrained (bf16 on disk, loaded in bf16, as
Trainer jobs load) and, after its last step, saves twice (worker/saves.py): DeepSpeed's save_checkpoint and the
consolidated 16-bit model as the Trainer's save_model gets it (accelerate's get_state_dict), written by rank 0.
Each figure is per rank, above something the target's own estimate has:

* checkpoint load: the load's exact peak above the pre-model baseline, fitted against the parameters loaded (the
  model's bytes in the calibration's load dtype). Carried: from_pretrained builds the model in host memory before
  deepspeed.initialize moves it (the Trainer passes no device_map), so the load above the baseline is host-side and
  identical on CUDA; the baseline is the target calibration's. Without zero.Init every rank loads the whole model.
  Under zero.Init (ZeRO-3, the DeepSpeed config made before from_pretrained) transformers builds the model
  partitioned, then rank 0 reads every shard of the checkpoint and each layer is gathered whole on every rank
  while rank 0 copies its values in (_load_state_dict_into_zero3_model): measured in a 2-rank sweep that loads so,
  rank 0 and the other ranks apart, each as its peak above the baseline less its partition's bytes (exact), fitted
  against the whole model's parameters; a target of k ranks is rank 0's line plus k - 1 times the others', each
  with its own partition's bytes. Without such points, the whole-load line at the partition's parameters
  (predicted). A load in fp32 is the line at twice the bf16 bytes. Every rank at its peak at once: the node is the
  ranks' sum.
* checkpoint save (DeepSpeed's save_checkpoint): each rank serializes its optimizer partition (fp32 master, Adam's
  states: host memory with the optimizer offloaded, identical on CUDA) and rank 0 the module's states. Its peak
  above the RSS at entry is fitted against the rank's partition; on CUDA rank 0's module states are device tensors,
  which torch.save copies to the host one storage at a time: the largest tensor's 16-bit bytes more on rank 0
  (predicted). With the optimizer on the device (nothing offloaded) every state is a device tensor: the rank's
  largest flat fp32 partition (or the largest tensor, if larger) above the steady RSS (predicted).
* final model save (the consolidated 16-bit model, the Trainer's save_model): the state dict is the whole model's
  16-bit bytes on every rank below ZeRO-3 (clone_tensors_for_torch_save on every rank) and on rank 0 alone at
  ZeRO-3 (_zero3_consolidated_16bit_state_dict). Those bytes are exact from the shapes (the calibration's measured
  state dict checks them). On CUDA they are a device-to-host copy of the 16-bit weights (`.to("cpu")`), the same
  host bytes as the CPU clone: predicted. The writing rank's transient (the peak above the RSS at entry, less the
  state dict: serializing the file) is fitted against the model's parameters and is host-side, identical on CUDA;
  it was measured writing one safetensors file (save_pretrained's sharded write serializes a shard at a time: an
  upper side for it).

What the final save is follows the job (config/trainerjob.py, `--final-save`): the consolidated 16-bit model
(above), DeepSpeed's save_checkpoint (ZeRO-3 with stage3_gather_16bit_weights_on_model_save false: the Trainer's
save_model then saves the full checkpoint, the checkpoint save's figure), or none (no final-save phase).

A save's peak is the rank's steady RSS (the estimate's, of the target) plus what the save adds; the node sums every
rank at its save's top at once (the holders' state dicts are built together; an upper side for the writer's
transient, which follows). The calibration runs with glibc's mmap threshold fixed (64 KiB): a target's tensors are
far above glibc's largest dynamic threshold (32 MiB), so each clone gets fresh pages as there, where a small model's
clone under the dynamic threshold reuses memory glibc kept free and shows less (measured: reports/estimate.md).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..config.modelshape import Shape
from ..errors import UserError
from . import partition, readnoise, stats
from .term import Term, fitted

PACKED = "rssprobe-save-load-calibration"
PACKED_FORMAT = 2  # 2: the zero.Init load's points (ranks, zero_init, the other ranks' load); 1 is read as well
PACKAGED = ("rssprobe.data", "calibrations", "cpu-save-load.json")
SAVE_CHECKPOINT, MODEL_16BIT = "save_checkpoint", "model_16bit"  # the worker's save kinds (contract.SAVE_KINDS)
# the terms this module adds to an estimate (analysis/estimate.py FIELDS, PHASES)
TERMS = ("checkpoint_load", "checkpoint_save", "model_save")


@dataclass(frozen=True)
class PhasePoint:
    """One calibration run's load and saves (rank 0, bytes)."""

    run: str
    params: int
    partition: int  # rank 0's partition (parameters)
    baseline: int  # RSS before the model (imports, process group, ops)
    load_peak: int  # the load's exact peak (absolute)
    load_bytes: int  # bytes per parameter the model was loaded in (2: bf16)
    save_checkpoint: int  # save_checkpoint's peak above its entry RSS
    model_16bit: int  # the consolidated save's peak above its entry RSS
    state_dict: int  # the consolidated state dict's bytes on rank 0 (exact: storages)
    # a load under zero.Init (ZeRO-3): its ranks, rank 0's partition bytes at the load (exact), and rank 1's
    # baseline and load peak (the ranks other than 0 load alike); 0 for a whole-model load (format 1)
    ranks: int = 1
    zero_init: int = 0
    load_partition_bytes: int = 0
    other_baseline: int = 0
    other_load_peak: int = 0


@dataclass
class Phases:
    """The load/save calibration: its points and what they were measured with."""

    points: list[PhasePoint]
    versions: dict[str, Any]
    scenario: str
    malloc_env: dict[str, str]
    provenance: dict[str, Any] = field(default_factory=dict)
    read_sd: float = 0.0  # the sd of one RSS read where it was measured (analysis/readnoise): no interval is finer

    def describe(self) -> str:
        whole = [p for p in self.points if not p.zero_init]
        init = [p for p in self.points if p.zero_init]
        sizes = ", ".join(f"{n / 1e6:.1f} M" for n in sorted({p.params for p in whole}))
        more = "" if not init else (f"; {len(init)} under zero.Init at {'/'.join(sorted({str(p.ranks) for p in init}))}"
                                    " ranks, ZeRO-3")
        v = self.versions
        return (f"the packaged CPU save/load calibration ({self.scenario}, {len(whole)} runs at {sizes}{more}, "
                f"torch {v.get('torch')}, DeepSpeed {v.get('deepspeed')}, {self.provenance.get('date', '?')})")


def point(s: Any) -> PhasePoint | str:
    """A run's (analysis.summary.Summary) load and save figures, or why it has none."""
    load = (s.by_kind.get("load") or [None])[0]
    saves = {e["save"]: e for e in s.by_kind.get("save", [])}
    if s.baseline is None or load is None or not s.params or {SAVE_CHECKPOINT, MODEL_16BIT} - set(saves):
        return "no baseline, load, or save_checkpoint and model_16bit saves"
    held = saves[MODEL_16BIT].get("state_dict_bytes")
    if not held:
        return "its consolidated save built no state dict on rank 0"
    partition_params = int(s.partition_params or s.params)
    zero_init: dict[str, int] = {}
    if load.get("zero_init"):  # the other ranks load alike: rank 1 stands for them
        other = s.of_rank(1) if s.manifest.world_size > 1 else None
        other_load = (other.by_kind.get("load") or [None])[0] if other is not None else None
        if other is None or other.baseline is None or other_load is None:
            return "a zero.Init load without rank 1's baseline and load"
        zero_init = {"ranks": int(s.manifest.world_size), "zero_init": 1,
                     "load_partition_bytes": int(load["partition_bytes"]),
                     "other_baseline": int(other.baseline["rss"]), "other_load_peak": int(other_load["peak"])}
    loaded_bytes = int(load["partition_bytes"]) / partition_params if zero_init else \
        int(load["whole_bytes"]) / int(s.params)
    return PhasePoint(run=str(s.run.path), params=int(s.params), partition=partition_params,
                      baseline=int(s.baseline["rss"]), load_peak=int(load["peak"]),
                      load_bytes=round(loaded_bytes),
                      save_checkpoint=int(saves[SAVE_CHECKPOINT]["peak"] - saves[SAVE_CHECKPOINT]["entry_rss"]),
                      model_16bit=int(saves[MODEL_16BIT]["peak"] - saves[MODEL_16BIT]["entry_rss"]),
                      state_dict=int(held), **zero_init)


def fits(ph: Phases) -> dict[str, stats.ProportionalFit]:
    """Each measured figure against what it grows with (module docstring); the zero.Init load's two lines where
    the calibration has zero.Init points at 2 sizes or more (the saves and the whole load: the other points)."""
    pts = [p for p in ph.points if not p.zero_init]
    zi = [p for p in ph.points if p.zero_init]
    out = {} if len({p.params for p in zi}) < 2 else {
        "checkpoint_load_zero_init": stats.proportional_fit(
            [float(p.params) for p in zi], [float(p.load_peak - p.baseline - p.load_partition_bytes) for p in zi]),
        "checkpoint_load_zero_init_other": stats.proportional_fit(
            [float(p.params) for p in zi],
            [float(p.other_load_peak - p.other_baseline - p.load_partition_bytes) for p in zi])}
    return out | {"checkpoint_load": stats.proportional_fit([float(p.params) for p in pts],
                                                          [float(p.load_peak - p.baseline) for p in pts]),
                  "checkpoint_save": stats.proportional_fit([float(p.partition) for p in pts],
                                                          [float(p.save_checkpoint) for p in pts]),
                  "model_save": stats.proportional_fit([float(p.params) for p in pts],
                                                     [float(p.model_16bit - p.state_dict) for p in pts])}


def holders(zero: partition.Zero, k: int) -> int:
    """Ranks of k (rank 0's node) that hold the consolidated 16-bit state dict: all below ZeRO-3, rank 0 at 3."""
    return 1 if zero.stage == 3 else k


def state_dict_bytes(shape: Shape, zero: partition.Zero) -> int:
    """The consolidated 16-bit state dict of one holder: the whole model's parameters in the training precision."""
    return shape.params * zero.element_bytes


def largest_flat_partition(shape: Shape, zero: partition.Zero) -> int:
    """Bytes of a rank's largest flat fp32 partition (a param group's at ZeRO-1/2, a sub-group's at 3): the largest
    storage save_checkpoint's torch.save copies from the device to the host at once."""
    parts = partition.group_partitions(shape, zero) if zero.stage < 3 else \
        [sum(g) for g in partition.sub_groups(shape, zero)]
    return max(parts) * partition.FP32


def terms(target: Any, ph: Phases, k: int, steady: Term, base: float, f: dict[str, stats.ProportionalFit] | None
          = None) -> dict[str, Term]:
    """k ranks' figures: the load, DeepSpeed's checkpoint save, the final model save, and
    the consolidated state dict alone (exact). `steady`: the target's steady Term of k ranks; `base`: k times the
    target calibration's lowest baseline (every figure's floor)."""
    f = f or fits(ph)
    shape, zero = target.shape, target.zero
    whole_points = [p for p in ph.points if not p.zero_init]
    cal_bytes = max(1, round(sum(p.load_bytes for p in whole_points) / len(whole_points)))
    under_init = target.zero_init and zero.stage == 3
    if getattr(target, "load_onto_device", False):  # a tensor at a time through host memory on its way to the GPU
        load = Term.exact(base + k * shape.largest_tensor * target.load_bytes)
    elif under_init and "checkpoint_load_zero_init" in f:  # measured: rank 0's line, k - 1 times the others'
        # each rank's partition, where zero.Init puts it in host memory (the CPU, or parameters offloaded; on
        # the GPU otherwise: the lines' gathered layer then gathers there too, an upper side)
        on_host = zero.accelerator == "cpu" or bool(zero.offload_param)
        part = Term.exact(k * partition.partition_params(shape, zero) * target.load_bytes if on_host else 0)
        x = shape.params * target.load_bytes / cal_bytes
        load = Term.exact(base) + part + fitted(f["checkpoint_load_zero_init"], x, 1, 0.0, ph.read_sd)
        if k > 1:
            load = load + fitted(f["checkpoint_load_zero_init_other"], x, k - 1, 0.0, ph.read_sd)
    else:  # the whole model per rank, or (zero.Init, not calibrated so) the same line at the partition
        loaded = partition.partition_params(shape, zero) if under_init else shape.params
        load = Term.exact(base) + fitted(f["checkpoint_load"], loaded * target.load_bytes / cal_bytes, k, 0.0,
                                         ph.read_sd)
    cuda = zero.accelerator != "cpu"
    d2h_module = Term.exact(shape.largest_tensor * zero.element_bytes if cuda else 0)
    if getattr(target, "optimizer_on_device", False):  # device tensors copied to the host a storage at a time
        flat = max(largest_flat_partition(shape, zero), shape.largest_tensor * zero.element_bytes)
        save = steady + Term.exact(k * flat)
    else:
        save = steady + fitted(f["checkpoint_save"], partition.partition_params(shape, zero), k, 0.0,
                               ph.read_sd) + d2h_module
    out = {"checkpoint_load": load, "checkpoint_save": save}
    final = getattr(target, "final_save", "model16")
    if final == "model16":
        held = Term.exact(holders(zero, k) * state_dict_bytes(shape, zero))
        write = fitted(f["model_save"], shape.params, 1, 0.0, ph.read_sd)  # the writing rank alone
        out.update(model_save=steady + held + write, model_save_state_dict=held)
    elif final == "checkpoint":  # save_model calls the engine's save_checkpoint: the checkpoint save again
        out["model_save"] = save
    return out


def final_rows(rows: list[dict[str, Any]], target: Any) -> list[dict[str, Any]]:
    """The phase rows as the job's final save makes them: no final-save row for a job that saves none; the row
    named for DeepSpeed's checkpoint when that is the final save."""
    final = getattr(target, "final_save", "model16")
    if final == "none":
        return [r for r in rows if r["key"] != "model_save"]
    if final == "checkpoint":
        for r in rows:
            if r["key"] == "model_save":
                r["phase"] = "final save (save_checkpoint)"
    return rows


def rules(target: Any, ph: Phases) -> tuple[dict[str, str], dict[str, str]]:
    """(measured, predicted): where each term of the load and the saves comes from, and the rule that carries it."""
    on, zero = ph.describe(), target.zero
    cuda = zero.accelerator != "cpu"
    measured = {"checkpoint_load": f"{on}: from_pretrained's peak above the baseline, per parameter loaded; host-side"
                                   + (" (identical on CUDA: the model is built in host memory before "
                                      "deepspeed.initialize moves it)" if cuda else ""),
                "checkpoint_save": f"{on}: save_checkpoint's peak above its entry, per parameter of the partition "
                                   "(the optimizer's partition serialized from host memory"
                                   + (": identical on CUDA with the optimizer offloaded)" if cuda else ")"),
                "model_save_write": f"{on}: the writing rank's transient (the consolidated save's peak above its "
                                    "entry, less its state dict), per parameter; one safetensors file (an upper "
                                    "side for save_pretrained's shards)"}
    who = "rank 0 (ZeRO-3: _zero3_consolidated_16bit_state_dict)" if zero.stage == 3 else \
        "every rank (below ZeRO-3: clone_tensors_for_torch_save on each)"
    final = getattr(target, "final_save", "model16")
    predicted = {"model_save_state_dict": f"the whole model's 16-bit bytes ({zero.element_bytes} B/param) on {who}"
                 + (", copied device-to-host (predicted for CUDA: the CPU clone's host bytes)" if cuda else
                    ": exact, the calibration's measured state dicts agree")} if final == "model16" else {}
    if final == "checkpoint":
        measured.pop("model_save_write")
        measured["model_save"] = ("the final save is DeepSpeed's save_checkpoint (--final-save checkpoint): the "
                                  "checkpoint save's figure, no 16-bit model gathered or cloned")
    elif final == "none":
        measured.pop("model_save_write")
    if getattr(target, "optimizer_on_device", False):
        measured.pop("checkpoint_save")
        predicted["checkpoint_save"] = ("the optimizer on the device: torch.save copies its device tensors to the host "
                                        "one storage at a time, at most the largest flat fp32 partition per rank "
                                        "above the steady RSS")
    elif cuda:
        predicted["checkpoint_save_module"] = ("rank 0's module states copied device-to-host one storage at a time "
                                               "by torch.save: the largest tensor's 16-bit bytes")
    if target.zero_init and zero.stage == 3 and any(p.zero_init for p in ph.points):
        ranks = sorted({p.ranks for p in ph.points if p.zero_init})
        measured["checkpoint_load"] = (
            f"{on}: under zero.Init ({'/'.join(map(str, ranks))} ranks: rank 0 reads every shard, every rank gathers "
            "each layer whole while rank 0 fills it), rank 0's peak and the other ranks' above the baseline, less the "
            "partition's bytes, per parameter of the whole model; the target's partition added exactly where it is "
            "in host memory (the CPU, or parameters offloaded); rank 0's line is mostly the checkpoint's mapped file "
            "pages (RSS counts them; the kernel can reclaim them under pressure: an upper side); host-side"
            + (" (identical on CUDA with the parameters offloaded; without, the layers gather on the device: an "
               "upper side)" if cuda else ""))
    elif target.zero_init and zero.stage == 3:
        predicted["checkpoint_load"] = ("under zero.Init each rank keeps its partition: the measured load line at "
                                        "the partition's parameters (not calibrated under zero.Init)")
    whole_points = [p for p in ph.points if not p.zero_init]
    if target.load_bytes != round(sum(p.load_bytes for p in whole_points) / len(whole_points)):
        predicted["checkpoint_load_dtype"] = (f"loaded at {target.load_bytes} B/param: the measured line at "
                                              f"{target.load_bytes} / {whole_points[0].load_bytes} of the "
                                              "parameters")
    if getattr(target, "load_onto_device", False):
        measured.pop("checkpoint_load")
        predicted.pop("checkpoint_load_dtype", None)
        predicted["checkpoint_load"] = ("loaded onto the GPU (--load-onto device: device_map=\"cuda:LOCAL_RANK\"): "
                                        "each rank's baseline plus its largest tensor, the one passing through "
                                        "host memory at a time; the checkpoint's file pages are the page cache, "
                                        "shared by the ranks and reclaimable, not counted")
    return measured, predicted


# ---- the packed form --------------------------------------------------------------------------------------------

def packaged() -> Path:
    """rssprobe/data/calibrations/cpu-save-load.json, the CPU save/load calibration rssprobe ships."""
    return Path(str(resources.files(PACKAGED[0]).joinpath(*PACKAGED[1:])))


def pack(ph: Phases) -> dict[str, Any]:
    return {"kind": PACKED, "format": PACKED_FORMAT, "provenance": ph.provenance, "versions": ph.versions,
            "scenario": ph.scenario, "malloc_env": ph.malloc_env, "read_sd": ph.read_sd,
            "points": [asdict(p) for p in ph.points]}


def unpack(data: dict[str, Any], path: Path) -> Phases:
    """A packed save/load calibration; UserError (one line) when it is not one or is damaged."""
    if data.get("kind") != PACKED or not isinstance(data.get("format"), int) or data["format"] > PACKED_FORMAT:
        raise UserError(f"{path}: not a packed save/load calibration (kind {data.get('kind')!r})")
    try:
        points = [_point(p) for p in data["points"]]
        out = Phases(points, dict(data["versions"]), str(data["scenario"]),
                     {str(k): str(v) for k, v in dict(data["malloc_env"]).items()}, dict(data.get("provenance") or {}),
                     readnoise.packed(data.get("read_sd", 0.0)))
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{path}: damaged save/load calibration ({type(e).__name__}: {e})") from None
    if len({p.params for p in points if not p.zero_init}) < 2:
        raise UserError(f"{path}: a save/load calibration needs runs at 2 sizes or more")
    if any(p.zero_init and p.ranks < 2 for p in points):
        raise UserError(f"{path}: a zero.Init load point needs 2 ranks or more (rank 0 and the others apart)")
    return out


def _point(p: dict[str, Any]) -> PhasePoint:
    fields = PhasePoint.__dataclass_fields__
    # a field with a default (the zero.Init load's, format 2) may be absent (format 1)
    counts = {name: _count(p[name] if name in p or not isinstance(fields[name].default, int) else fields[name].default)
              for name in fields if name != "run"}
    return PhasePoint(run=str(p["run"]), **counts)


def _count(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{v!r} is not a count")
    return v


def load(path: Path | None = None) -> Phases:
    """The packaged save/load calibration (or the one at `path`)."""
    where = path or packaged()
    try:
        data = json.loads(where.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{where}: unreadable save/load calibration ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}: not a packed save/load calibration")
    return unpack(data, where)


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, indent=1) + "\n"


def sources(target: Any, cal: Any) -> dict[str, str]:
    """Phase key (analysis/estimate.PHASES) -> where its figure comes from, in a few words (the phase table's
    column): the target's calibration, or the save/load calibration and the rule that carries it."""
    cuda, zero = target.zero.accelerator != "cpu", target.zero
    own = "calibration" + (" (GPU)" if cuda else "") + " + shapes"
    out = {key: own for key in ("initialize_peak", "steady", "step_peak")}
    have_load = bool(cal.points) and all(p.load_peak is not None for p in cal.points)
    have_save = bool(cal.points) and all(p.checkpoint_peak is not None for p in cal.points)
    init_ranks = sorted({p.ranks for p in cal.phases.points if p.zero_init}) if cal.phases is not None else []
    under_init = target.zero_init and zero.stage == 3
    out["checkpoint_load"] = "calibration" if have_load else \
        f"measured on CPU under zero.Init ({'/'.join(map(str, init_ranks))} ranks)" if under_init and init_ranks else \
        "predicted: CPU load line at the partition (zero.Init)" if under_init else \
        "measured on CPU, host-side: same on CUDA" if cuda else "measured (CPU save/load calibration)"
    out["checkpoint_save"] = own if have_save else \
        "measured on CPU + predicted device-to-host copy" if cuda else "measured (CPU save/load calibration)"
    if getattr(target, "load_onto_device", False):
        out["checkpoint_load"] = "predicted: a tensor at a time onto the GPU"
    if getattr(target, "optimizer_on_device", False):
        out["checkpoint_save"] = "predicted: largest flat partition device-to-host"
    out["model_save"] = "predicted: 16-bit weights device-to-host + measured write" if cuda else \
        "exact state dict + measured write"
    if getattr(target, "final_save", "model16") == "checkpoint":
        out["model_save"] = out["checkpoint_save"]
    return out
