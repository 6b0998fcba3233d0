"""DeepSpeed's own host-memory estimator with its terms filled in, and which term differs from rssprobe's and why.

Read from DeepSpeed 0.19.8 (as installed here; the same lines in master as stored):

* deepspeed/runtime/zero/stage_1_and_2.py:4017-4034 `estimate_zero2_model_states_mem_needs`, cpu_offload:
  `total_gpus = num_nodes * num_gpus_per_node` (l.4023) and `cpu_mem = total_params * max(4 * total_gpus, 16) *
  additional_buffer_factor` (l.4027, factor 1.5): the model-copy term counts the GPUs of ALL nodes, and the
  16 B/param of optimizer state is not divided among the nodes either; its figure is per node.
* deepspeed/runtime/zero/stage3.py:4016-4048 `estimate_zero3_model_states_mem_needs`, cpu_offload, not
  zero_init (rssprobe builds the model whole): `gpus_factor = 1 / num_nodes` (l.4026), `cpu_mem = total_params *
  max(4 * num_gpus_per_node, 18 * gpus_factor) * 1.5` with the parameters offloaded (l.4036), `16 *
  gpus_factor` without (l.4044): one node's GPUs, the states shared among the nodes.

So for one node both agree; on K nodes ZeRO-2's figure grows K-fold in its copy term where ZeRO-3's does not.

ZeRO-3 has a second row, zero_init (stage3.py:4033-4034 / 4041-4042: `cpu_mem = total_params * 18 * gpus_factor *
1.5` with the parameters offloaded, 16 without): no model copies, the states alone.
`estimate_zero3_model_states_mem_needs_all_cold` prints both rows; the one matching the target's zero.Init is
reconciled (Llama-3-70B, 4 nodes x 8 GPUs, parameters offloaded: 443.53 GiB with zero_init=1, 3,154 without).
"""

from __future__ import annotations

from typing import Any

from .provision import gib

FACTOR = 1.5  # additional_buffer_factor's default


def formula(params: int, gpus_per_node: int, nodes: int, stage: int, offload_param: bool,
            zero_init: bool = False) -> dict[str, Any]:
    """DeepSpeed's CPU figure per node, its formula with the numbers in, and its two terms (bytes, before the
    buffer factor): the model copies it counts and the model states. `zero_init`: ZeRO-3's zero_init=1 row."""
    p = f"{params / 1e9:,.2f} B params" if params >= 1e8 else f"{params:,} params"
    if stage == 3 and zero_init:
        states = 18 if offload_param else 16
        shared = states / nodes
        text = f"{p} x {states}" + (f" / {nodes} nodes" if nodes > 1 else "") + f" x {FACTOR}"
        return {"formula": text, "bytes": params * shared * FACTOR, "zero_init": True,
                "where": f"DeepSpeed 0.19.8 {'stage3.py:4034' if offload_param else 'stage3.py:4042'}",
                "copies_bytes": 0, "states_bytes": params * shared, "deciding": "model states"}
    if stage == 3:
        states = 18 if offload_param else 16
        copies = 4 * gpus_per_node
        shared = states / nodes
        text = (f"{p} x max(4 x {gpus_per_node} GPUs of the node, {states}"
                + (f" / {nodes} nodes" if nodes > 1 else "") + f") x {FACTOR}")
        per_param = max(copies, shared)
        where = "stage3.py:4036" if offload_param else "stage3.py:4044"
    else:
        copies = 4 * gpus_per_node * nodes
        shared = 16
        text = (f"{p} x max(4 x {gpus_per_node * nodes} GPUs" + (f" of all {nodes} nodes" if nodes > 1 else "")
                + f", 16) x {FACTOR}")
        per_param = max(copies, shared)
        where = "stage_1_and_2.py:4027"
    return {"formula": text, "bytes": params * per_param * FACTOR, "where": f"DeepSpeed 0.19.8 {where}",
            "zero_init": False,
            "copies_bytes": params * copies, "states_bytes": params * shared,
            "deciding": "model copies" if copies >= shared else "model states"}


def reconcile(f: dict[str, Any], node: dict[str, Any], nodes: int, stage: int) -> str:
    """One sentence: which of DeepSpeed's terms differs from rssprobe's figure, by how much, and why."""
    copy, steady, peak = node["initialize_model_copy_bytes"], node["steady_rss_bytes"], node["peak_rss_bytes"]
    if f.get("zero_init"):
        return (f"DeepSpeed's zero_init=1 row, {gib(f['bytes'])} GiB, is its model-states term alone "
                f"({gib(f['states_bytes'])} GiB x {FACTOR}: no model copy, as under zero.Init); rssprobe's "
                f"{gib(steady)} GiB steady is the live buffers of the target's exact partitions, each process's "
                f"baseline and fixed cost and glibc's retention, {gib(peak)} GiB at the peak.")
    if f["deciding"] == "model copies":
        sentence = (f"DeepSpeed's {gib(f['bytes'])} GiB is its model-copy term ({gib(f['copies_bytes'])} GiB of "
                    f"fp32 copies x {FACTOR}); rssprobe measures those copies only during initialize "
                    f"({gib(copy)} GiB with each process's baseline, freed once the model is partitioned), and "
                    f"counts the buffers, fixed cost and glibc's retention that stay ({gib(steady)} GiB steady)")
    else:
        sentence = (f"DeepSpeed's {gib(f['bytes'])} GiB is its model-states term ({gib(f['states_bytes'])} GiB x "
                    f"{FACTOR}: fp32 master, gradient and Adam's two states); rssprobe adds what it leaves out, "
                    f"each process's baseline and fixed cost, the bf16 copies, the temp gradient buffers and glibc's "
                    f"retention ({gib(steady)} GiB steady, {gib(peak)} GiB at the peak)")
    if nodes > 1 and stage < 3:
        sentence += (f"; its ZeRO-2 formula counts the GPUs of all {nodes} nodes and the whole optimizer state on "
                     "every node (stage_1_and_2.py:4023-4027), where its ZeRO-3 one counts one node's GPUs and "
                     "shares the states (stage3.py:4026)")
    return sentence + "."
