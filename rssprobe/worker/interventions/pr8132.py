"""The two mitigations of DeepSpeed PR #8132, as independent interventions.

float-scale: in DeepSpeedZeroOptimizer.unscale_and_clip_grads, with CPU offload, the
combined scale becomes a Python float before the in-place multiply (the GPU path keeps
the tensor to avoid a device sync).
malloc-trim: in DeepSpeedCPUAdam.step / step_subgroup, malloc_trim(0) once per param
group (subgroup) the first time it steps. Keyed by the group index the optimizer sees,
as the PR does: ZeRO-2 hands the optimizer one group at a time, so that index is always
0 and the trim fires once per optimizer, whatever the number of groups. The counts show it.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from ...contract.interventions import FLOAT_SCALE, MALLOC_TRIM
from .. import glibc, procfs
from .base import Context, Refused, rewrite_method


def apply_float_scale(ctx: Context, options: dict[str, str]) -> None:
    import torch
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    effect = ctx.effect(FLOAT_SCALE)
    effect.update(float_conversions=0, calls=0)

    def where(scale: Any) -> None:
        """The scale's device before any conversion: float() of a CUDA tensor is a device sync (an .item())."""
        key = f"scale_device.{scale.device.type}" if torch.is_tensor(scale) else "scale_device.none"
        effect[key] = effect.get(key, 0) + 1

    def note(kind: str, scale: Any) -> None:
        effect["calls"] += 1
        effect["float_conversions"] += kind == "converted"
        key = f"scale_type.{type(scale).__name__}"
        effect[key] = effect.get(key, 0) + 1

    rewrite_method(
        DeepSpeedZeroOptimizer, "unscale_and_clip_grads",
        [("for grad in grad_groups_flat:", [
            "__rssprobe_where(combined_scale)",
            "if self.cpu_offload and __rssprobe_is_tensor(combined_scale):",
            "    combined_scale = float(combined_scale)",
            "    __rssprobe_note('converted', combined_scale)",
            "else:",
            "    __rssprobe_note('kept', combined_scale)",
        ])],
        FLOAT_SCALE, {"__rssprobe_is_tensor": torch.is_tensor, "__rssprobe_note": note,
                                   "__rssprobe_where": where})


def _trim(ctx: Context, where: str) -> None:
    effect = ctx.effect(MALLOC_TRIM)
    before_rss, before_mi = procfs.rss_bytes(), glibc.mallinfo2()
    result = glibc.malloc_trim(0)
    if result is None:
        effect["not_available"] = effect.get("not_available", 0) + 1
        return
    after_rss, after_mi = procfs.rss_bytes(), glibc.mallinfo2()
    effect["trims"] = effect.get("trims", 0) + 1
    effect.setdefault("log", []).append({
        "where": where, "step": ctx.step, "returned": result,
        "rss_released": before_rss - after_rss,
        "fordblks_released": before_mi["fordblks"] - after_mi["fordblks"],  # type: ignore[index]
    })


def apply_malloc_trim(ctx: Context, options: dict[str, str]) -> None:
    from deepspeed.ops.adam.cpu_adam import DeepSpeedCPUAdam

    ctx.effect(MALLOC_TRIM).update(trims=0)
    step = inspect.getattr_static(DeepSpeedCPUAdam, "step")
    if "enumerate(self.param_groups)" not in inspect.getsource(step):
        raise Refused(f"{MALLOC_TRIM}: DeepSpeedCPUAdam.step in the installed version does not loop over "
                      "enumerate(self.param_groups); refusing to guess where a group's first step is")

    @functools.wraps(step)
    def patched_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = step(self, *args, **kwargs)
        done = self.__dict__.setdefault("_rssprobe_trimmed_groups", set())
        for group_id, _group in enumerate(self.param_groups):
            if group_id not in done:
                done.add(group_id)
                _trim(ctx, f"step group {group_id}")
        return out

    DeepSpeedCPUAdam.step = patched_step
    subgroup = inspect.getattr_static(DeepSpeedCPUAdam, "step_subgroup", None)
    if subgroup is None:
        ctx.effect(MALLOC_TRIM)["step_subgroup"] = "absent in this version"
        return

    @functools.wraps(subgroup)
    def patched_subgroup(self: Any, subgroup_id: int, *args: Any, **kwargs: Any) -> Any:
        out = subgroup(self, subgroup_id, *args, **kwargs)
        done = self.__dict__.setdefault("_rssprobe_trimmed_subgroups", set())
        if subgroup_id not in done:
            done.add(subgroup_id)
            _trim(ctx, f"subgroup {subgroup_id}")
        return out

    DeepSpeedCPUAdam.step_subgroup = patched_subgroup


APPLY = {FLOAT_SCALE: apply_float_scale, MALLOC_TRIM: apply_malloc_trim}
