"""Each rank's ZeRO buffers computed the way DeepSpeed computes them, from a model's exact tensor shapes (pure).

Read from DeepSpeed 0.19.8 (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, partition_parameters.py):

* Stages 1 and 2 (DeepSpeedZeroOptimizer.__init__): each param group's tensors are flattened into one buffer
  padded to a multiple of `nccl_start_alignment_factor (2) x world` elements (`flatten_dense_tensors_aligned`;
  `parameter_alignment` false by default adds no per-tensor padding), and split into `world` equal partitions
  (`partition_size = len(bit16_groups_flat[i]) // world`). Per group every rank holds the whole flat bit16
  buffer (on the accelerator), its fp32 master partition (`weights_partition`, pinned when offload_optimizer's
  pin_memory is on) and, offloaded, a bit16 staging copy of it (`param_buffer_of_bit16_for_cpu_offload_groups`,
  pinned); then `temp_grad_buffer_for_cpu_offload` (pinned) and `_for_gpu_offload` (accelerator), each the
  largest parameter's numel of the model dtype; `initialize_optimizer_states` adds the fp32 gradient partition
  per group (pinned); DeepSpeedCPUAdam's first step the two fp32 states per partition.
* Stage 3 (partition_parameters.Init._partition_param): every parameter is padded to a multiple of `world`
  and each rank keeps `ceil(numel / world)` elements (its `ds_tensor`; pinned one by one on the CPU with
  offload_param); a parameter of at most `param_persistence_threshold` elements is persistent (held whole on
  every rank). DeepSpeedZeroOptimizer_Stage3 groups the partitions of each param group into sub-groups of at
  least `sub_group_size` elements (`_create_fp16_sub_groups`); with offload_param one flat CPU buffer per
  param group takes over the ds_tensors (`_create_param_groups_fp16_flat_cpu_memory`, pinned), the
  per-parameter ones are freed; per sub-group an fp32 master (`_create_fp32_partitions`) and its gradient
  (`initialize_optimizer_states`, pinned); one flat gradient partition buffer for all (`grad_partitions_flat_
  buffer`, pinned); the reduce bucket (`reduce_bucket_size` elements on the accelerator, resident only where
  backward's gradients touched it).

`host` says where a buffer lives on a CUDA machine (on the CPU accelerator everything is host memory); the
roles are the census's (rssprobe/data/roles.toml). tests/test_estimate.py checks every figure here against the
`partition` event and the census of recorded real runs, and the pin sequence against their `pins` events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.modelshape import Shape
from ..contract.workerscenario import DEFAULT_ZERO_STAGE

FP32 = 4  # DeepSpeed's master weights, their gradients and Adam's states are float32 (master_weights_and_grads_dtype)
ALIGNMENT = 2  # stage_1_and_2.py: nccl_start_alignment_factor


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Zero:
    """What DeepSpeed's partitioning of one rank depends on."""

    stage: int
    world: int
    element_bytes: int  # the training precision's element (bf16: 2)
    offload_param: bool = False
    pin_optimizer: bool = True  # offload_optimizer.pin_memory as DeepSpeed took it
    pin_param: bool = True
    reduce_bucket_size: int = 500_000_000
    sub_group_size: int = 1_000_000_000
    persistence_threshold: int = 100_000
    model_persistence_threshold: int = 2**63 - 1
    accelerator: str = "cpu"


def zero_of(zero: dict[str, Any], element_bytes: int, world: int, accelerator: str, defaults: dict[str, Any],
            pin: dict[str, Any] | None = None) -> Zero:
    """The Zero of a scenario's `zero` table (a manifest's or Scenario.zero.model_dump()), DeepSpeed's own
    defaults (rssprobe.worker.dsinfo) for what it leaves unset, and the pin_memory DeepSpeed took (a run's pins
    event says; else the scenario's, else DeepSpeed's default)."""
    told = zero.get("pin_memory")
    default_pin = told if isinstance(told, bool) else bool(defaults.get("pin_memory", True))
    pin = pin or {}

    def effective(key: str) -> bool:
        return pin[key] if isinstance(pin.get(key), bool) else default_pin

    threshold = zero.get("stage3_param_persistence_threshold")
    return Zero(stage=int(zero.get("stage", DEFAULT_ZERO_STAGE)), world=world, element_bytes=element_bytes,
                offload_param=zero.get("offload_param") is not None, pin_optimizer=effective("offload_optimizer"),
                pin_param=effective("offload_param"),
                reduce_bucket_size=int(zero.get("reduce_bucket_size") or Zero.reduce_bucket_size),
                sub_group_size=int(defaults.get("sub_group_size", Zero.sub_group_size)),
                persistence_threshold=int(threshold if threshold is not None else
                                          defaults.get("param_persistence_threshold", Zero.persistence_threshold)),
                model_persistence_threshold=int(defaults.get("model_persistence_threshold",
                                                             Zero.model_persistence_threshold)),
                accelerator=accelerator)


@dataclass(frozen=True)
class Buffer:
    """One buffer a rank holds: DeepSpeed's attribute, its census role, elements, and where it lives."""

    name: str
    role: str
    elements: int
    element_bytes: int
    pinned: bool
    host: bool  # host memory on a CUDA machine (everything is on the CPU accelerator)
    at: str  # "init" (allocated inside deepspeed.initialize) or "step" (in the first step)

    @property
    def bytes(self) -> int:
        return self.elements * self.element_bytes


def group_partitions(shape: Shape, zero: Zero) -> list[int]:
    """Stages 1/2: each param group's partition (elements a rank holds), padded as DeepSpeed pads."""
    align = ALIGNMENT * zero.world
    return [_ceil(sum(g), align) * align // zero.world for g in shape.groups]


def persistent(shape: Shape, zero: Zero) -> list[list[bool]]:
    """Stage 3: which parameters stay whole on every rank (Init._convert_to_deepspeed_param)."""
    budget, kept, out = zero.model_persistence_threshold // zero.world, 0, []
    for group in shape.groups:
        flags = []
        for n in group:
            keep = n <= zero.persistence_threshold and kept + n <= budget
            kept += n if keep else 0
            flags.append(keep)
        out.append(flags)
    return out


def param_partitions(shape: Shape, zero: Zero) -> list[list[int]]:
    """Stage 3: each parameter's ds_tensor (Init._aligned_size // world)."""
    return [[_ceil(n, zero.world) for n in group] for group in shape.groups]


def sub_groups(shape: Shape, zero: Zero) -> list[list[int]]:
    """Stage 3: the partitions of each sub-group, over all param groups in order (_create_fp16_sub_groups)."""
    out: list[list[int]] = []
    for group in param_partitions(shape, zero):
        if zero.sub_group_size >= sum(group):
            out.append(list(group))
            continue
        current: list[int] = []
        for k, p in enumerate(group):
            current.append(p)
            if sum(current) >= zero.sub_group_size or k == len(group) - 1:
                out.append(current)
                current = []
    return out


def partition_params(shape: Shape, zero: Zero) -> int:
    """What a run's `partition` event records: sum(partition_size) at stages 1/2, sum of the sub-groups'
    fp16_partitioned_groups_flat_numel at stage 3."""
    if zero.stage == 3:
        return sum(sum(s) for s in sub_groups(shape, zero))
    return sum(group_partitions(shape, zero))


def refusal(shape: Shape, zero: Zero) -> str | None:
    """Why DeepSpeed cannot partition this model over these ranks: a rank whose partition of a param group would
    hold padding only (stages 1/2), or more ranks than elements to partition (stage 3); None when it can."""
    if zero.world < 1:
        return f"{zero.world} ranks"
    if zero.stage == 3:
        if zero.world > shape.params:
            return f"{zero.world} ranks do not divide {shape.params:,} parameters (a rank would hold none)"
        return None
    for g, (group, part) in enumerate(zip(shape.groups, group_partitions(shape, zero), strict=True)):
        if sum(group) <= (zero.world - 1) * part:
            return (f"{zero.world} ranks do not divide param group {g} ({sum(group):,} elements, partitions of "
                    f"{part:,}): the last rank would hold padding only")
    return None


def buffers(shape: Shape, zero: Zero) -> list[Buffer]:
    """Every ZeRO buffer of one rank (all ranks hold the same sizes: DeepSpeed pads the partitions equal)."""
    e, on_cpu = zero.element_bytes, zero.accelerator == "cpu"
    out: list[Buffer] = []
    if zero.stage in (1, 2):
        for flat_part in group_partitions(shape, zero):
            out += [Buffer("bit16_groups_flat", "bit16_params", flat_part * zero.world, e, False, on_cpu, "init"),
                    Buffer("single_partition_of_fp32_groups", "fp32_master", flat_part, FP32, zero.pin_optimizer,
                           True, "init"),
                    Buffer("param_buffer_of_bit16_for_cpu_offload_groups", "h2d_staging", flat_part, e,
                           zero.pin_optimizer, True, "init")]
        largest = shape.largest_tensor
        out += [Buffer("temp_grad_buffer_for_cpu_offload", "temp_grad_buffers", largest, e, zero.pin_optimizer,
                       True, "init"),
                Buffer("temp_grad_buffer_for_gpu_offload", "temp_grad_buffers", largest, e, False, on_cpu, "init")]
        out += [Buffer("single_partition_of_fp32_groups.grad", "fp32_grad", p, FP32, zero.pin_optimizer, True,
                       "init") for p in group_partitions(shape, zero)]
        states = group_partitions(shape, zero)
    else:
        parts = param_partitions(shape, zero)
        for group in parts:
            name = "param_groups_fp16_flat_cpu_memory" if zero.offload_param else "lp_param_buffer"
            # _create_param_groups_fp16_flat_cpu_memory pins it whatever pin_memory says (accelerator.pin_memory)
            out.append(Buffer(name, "bit16_partitions", sum(group), e, zero.offload_param,
                              zero.offload_param or on_cpu, "init"))
        subs = [sum(s) for s in sub_groups(shape, zero)]
        out += [Buffer("fp32_partitioned_groups_flat", "fp32_master", s, FP32, False, True, "init") for s in subs]
        out += [Buffer("fp32_partitioned_groups_flat.grad", "fp32_grad", s, FP32, zero.pin_optimizer, True, "init")
                for s in subs]
        out.append(Buffer("grad_partitions_flat_buffer", "grad_partitions", sum(subs), e, zero.pin_optimizer, True,
                          "init"))
        out.append(Buffer("ipg_buckets.buffer (touched)", "buckets", min(zero.reduce_bucket_size, shape.params), e,
                          False, on_cpu, "step"))
        if zero.world > 1:  # at one rank a gathered parameter is a view of its own partition; gathered in forward
            whole = sum(n for group, keep in zip(shape.groups, persistent(shape, zero), strict=True)
                        for n, k in zip(group, keep, strict=True) if k)
            out.append(Buffer("persistent_parameters", "gathered_params", whole, e, False, on_cpu, "step"))
        states = subs
    out += [Buffer(f"optimizer.state.{name}", f"adam_{name}", p, FP32, False, True, "step")
            for p in states for name in ("exp_avg", "exp_avg_sq")]
    return out


def roles(bufs: list[Buffer], host_only: bool, at: str = "step") -> dict[str, int]:
    """Bytes per census role of the buffers alive after `at` ("init": after deepspeed.initialize; "step": after
    the first step), host memory only when `host_only` (a CUDA machine)."""
    out: dict[str, int] = {}
    for b in bufs:
        if (at == "step" or b.at == "init") and (b.host or not host_only):
            out[b.role] = out.get(b.role, 0) + b.bytes
    return out


def pin_ops(shape: Shape, zero: Zero, via: str = "torch") -> list[tuple[Any, ...]]:
    """The pin requests of one rank in the order DeepSpeed makes them, as pinrule.predict replays them:
    ('alloc', id, bytes, via) and ('free', id). `via` "register" stands for pin.register (exact size)."""
    ops: list[tuple[Any, ...]] = []

    def alloc(nbytes: int) -> int:
        ops.append(("alloc", len(ops), nbytes, via))
        return len(ops) - 1

    e = zero.element_bytes
    if zero.stage in (1, 2):
        parts = group_partitions(shape, zero)
        if zero.pin_optimizer:
            for p in parts:  # __init__, per group: the fp32 master partition, then its bit16 staging buffer
                alloc(p * FP32)
                alloc(p * e)
            alloc(shape.largest_tensor * e)  # temp_grad_buffer_for_cpu_offload
            for p in parts:  # initialize_optimizer_states: the fp32 gradient partitions
                alloc(p * FP32)
        return ops
    first = []
    if zero.offload_param and zero.pin_param:  # Init._partition_param, parameter by parameter
        cuda = zero.accelerator != "cpu"
        for group, keep in zip(param_partitions(shape, zero), persistent(shape, zero), strict=True):
            first += [alloc(p * e) for p, k in zip(group, keep, strict=True) if not (cuda and k)]
    if zero.offload_param:
        for group in param_partitions(shape, zero):
            alloc(sum(group) * e)
        ops += [("free", i) for i in first]  # the flat buffer took the ds_tensors over
    if zero.pin_optimizer:
        subs = [sum(s) for s in sub_groups(shape, zero)]
        for s in subs:
            alloc(s * FP32)
        alloc(sum(subs) * e)
    return ops


PAGE = 4096  # mlock and cudaHostRegister lock whole pages


def locked_peak(shape: Shape, zero: Zero) -> int:
    """The most bytes one rank's pin requests hold at once when each is pinned at its own pages (DeepSpeed's native
    backend: page-aligned posix_memalign + mlock of the exact size, so ceil(bytes / page) pages each): what
    RLIMIT_MEMLOCK must allow a rank (run/preflight.py) and what VmLck reads with the native backend."""
    held = peak = 0
    sizes: dict[int, int] = {}
    for op in pin_ops(shape, zero, "native"):
        if op[0] == "alloc":
            sizes[op[1]] = _ceil(op[2], PAGE) * PAGE
            held += sizes[op[1]]
            peak = max(peak, held)
        else:
            held -= sizes.pop(op[1], 0)
    return peak
