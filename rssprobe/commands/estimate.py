"""rssprobe estimate: host RAM per rank and per node for a run nobody has made yet, and whether it fits."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..config import knownmodels
from ..config.scenariospec import ScenarioSpec
from ..reporters import estimateviews, output
from ..workflows.estimate import entry
from ..workflows.estimate.plan import CALIBRATION_STEPS
from ..workflows.estimate.request import ACCELERATORS, Request, which_model, zero_options
from . import common_args


@click.command("estimate", epilog=common_args.examples(
    "rssprobe estimate --model llama-2-7b --gpus-per-node 8",
    "rssprobe estimate --hf-config config.json --gpus-per-node 8 --node-ram 1T",
    "rssprobe estimate issue7693-cpu --params 1.3B --ranks-per-node 2 --accelerator cpu")
)
@click.argument("scenario_ref", metavar="[SCENARIO]", required=False)
@click.option("--model", metavar="NAME", help="A well-known public model by name (its published config ships with "
              "rssprobe): " + ", ".join(knownmodels.names())
              + "; or its Hugging Face name, e.g. meta-llama/Meta-Llama-3-70B.")
@click.option("--hf-config", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="A Hugging Face config.json: the model it describes.")
@common_args.scenario_sets
@click.option("--params", type=common_args.param_count(), metavar="N",
              help="Target parameter count: 7B, 1.3B, 350M, 70e9 (sets model.params; default: the model's own).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), metavar="G", help="GPUs (ranks) of one node: CUDA.")
@click.option("--ranks-per-node", type=click.IntRange(min=1), metavar="R",
              help="Ranks of one node, with --accelerator (cpu: every buffer in host RAM).")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, metavar="K",
              help="Nodes of that many ranks each (the node's figures are per node).")
@click.option("--accelerator", type=click.Choice(ACCELERATORS),
              help="Where the ranks train (--gpus-per-node means cuda).")
@click.option("--stage", type=click.IntRange(1, 3), help="ZeRO stage (3 offloads the parameters too, unless "
              "--no-offload-param).")
@click.option("--offload-param/--no-offload-param", "offload_param", default=None,
              help="ZeRO-3: parameters offloaded to the CPU (default with --stage 3 and the optimizer offloaded).")
@click.option("--offload-optimizer/--no-offload-optimizer", "offload_optimizer", default=None,
              help="CUDA: the optimizer states offloaded to host RAM (default), or kept on the GPU (nothing "
                   "offloaded: host RAM holds the baseline, each process's fixed cost, the load and the saves).")
@click.option("--zero-init/--no-zero-init", "zero_init", default=None,
              help="ZeRO-3: the model built (or loaded) under deepspeed.zero.Init, each rank holding its partition "
                   "(default on for a transformers model at ZeRO-3, as HF Trainer and accelerate build it).")
@click.option("--load-dtype", type=click.Choice(["bf16", "fp32"]),
              help="The dtype a transformers model is loaded in, from_pretrained(torch_dtype=...) (default bf16, as "
                   "Trainer jobs load published checkpoints).")
@click.option("--load-onto", "load_onto", type=click.Choice(["host", "device"]),
              help="Where from_pretrained puts the weights: host (no device_map: HF Trainer's, accelerate's, "
                   "LLaMA-Factory's default; every rank holds the whole model until deepspeed.initialize) or device "
                   "(device_map=\"cuda:LOCAL_RANK\", as ms-swift loads below ZeRO-3: no whole copy in host RAM).")
@click.option("--trainable", metavar="N|P%",
              help="Trainable parameters, a count (40M) or a share (0.5%) for an adapter: the optimizer's states, "
                   "fp32 master and gradients hold those only (default: all).")
@click.option("--final-save", "final_save", type=click.Choice(["model16", "checkpoint", "none"]),
              help="The job's final save: model16, the consolidated 16-bit model (HF Trainer's save_model; at ZeRO-3 "
                   "with stage3_gather_16bit_weights_on_model_save true); checkpoint, DeepSpeed's save_checkpoint "
                   "(ZeRO-3 with that flag false: the Trainer saves the full checkpoint instead); none (default "
                   "model16, as the published ZeRO configs save).")
@click.option("--seen-steady", "seen_steady", type=common_args.byte_size(), metavar="SIZE",
              help="The host RAM your job's node used while it trained (steady, between steps; e.g. 60G from free "
                   "or top): what it holds above this estimate's steady figure is the trainer's own (its dataset, "
                   "data-loader workers, tokenizer), added to every phase, so that the load and the saves are "
                   "answered for your job.")
@click.option("--node-ram", type=common_args.byte_size(), metavar="SIZE",
              help="The node's RAM for the job, e.g. 2T or 1536G (default for a CPU target on one node: this "
                   "machine's MemTotal or cgroup limit, the smaller).")
@click.option("--calibration", type=click.Path(path_type=Path), metavar="DIR|FILE",
              help="A scale directory or packed calibration to estimate from instead of this machine's cached one "
                   "(CUDA: the packaged H200 sweep unless given).")
@click.option("--calibrate", is_flag=True, help="Calibrate now if this machine's calibration is not cached (as the "
              "first estimate does); without a rank count the estimate is for one CPU rank.")
@common_args.fresh_option
@common_args.allocator_option
@common_args.malloc_env_option()
@common_args.patch_option("Estimate with")
@click.option("--torch-alloc-conf", "torch_alloc_conf", metavar="KEY:VALUE,...",
              help="PYTORCH_CUDA_ALLOC_CONF the CUDA run would have, e.g. pinned_max_round_threshold_mb:1 (the pinned "
                   "slack is predicted under it, for the calibration's torch).")
@common_args.repeat_option(None, "per calibration size; default 3 under glibc's own mmap threshold, whose retention "
                           "makes identical runs differ, 1 with it fixed")
@click.option("--calibration-ranks", type=click.IntRange(1),
              help="Ranks of each calibration run (default 2 for a target of several ranks per node: a process among "
                   "several has costs of its own, and ZeRO-3 its gathers; 1 for one).")
@click.option("--calibration-steps", type=click.IntRange(2),
              help=f"Steps of each calibration run (default {CALIBRATION_STEPS}; a target of fewer steps is "
                   "estimated from the first ones).")
@click.option("--calibration-params", type=common_args.param_counts(), metavar="N,N,N",
              help="Calibrate at these sizes instead of 1, 2 and 3 layers (nearer a large target).")
@common_args.python_options
@common_args.format_option(["terminal", "json", "markdown"])
def command(scenario_ref: str | None, model: str | None, hf_config: Path | None, overrides: tuple[str, ...],
            steps: int | None, params: float | None, gpus_per_node: int | None, ranks_per_node: int | None, nodes: int,
            accelerator: str | None, stage: int | None, offload_param: bool | None, offload_optimizer: bool | None,
            zero_init: bool | None, load_dtype: str | None, load_onto: str | None, trainable: str | None,
            final_save: str | None, seen_steady: int | None, node_ram: int | None,
            calibration: Path | None, calibrate: bool, fresh: bool, allocator: str, malloc_env: tuple[str, ...],
            patches: tuple[str, ...], torch_alloc_conf: str | None, repeat: int | None,
            calibration_ranks: int | None, calibration_steps: int | None, calibration_params: list[float] | None,
            env_ref: str | None, python: str | None, fmt: str) -> None:
    """Host RAM per rank and per node for a model on G GPUs (or R CPU ranks) per node, estimated; whether it
    fits the node's RAM, phase by phase, and what to provision."""
    ref, source = which_model(scenario_ref, model, hf_config)
    spec = ScenarioSpec(ref, overrides, steps=steps, params=params, torch_alloc_conf=torch_alloc_conf,
                        **zero_options(stage, offload_param, offload_optimizer))
    data = entry.run(Request(
        spec, source, gpus_per_node=gpus_per_node, ranks_per_node=ranks_per_node, nodes=nodes,
        accelerator=accelerator, node_ram=node_ram, calibration=calibration, calibrate=calibrate, fresh=fresh,
        options=common_args.run_options(patches=patches, allocator=allocator, malloc_env=malloc_env, repeat=repeat,
                                        env_ref=env_ref, python=python),
        calibration_ranks=calibration_ranks, calibration_steps=calibration_steps,
        calibration_params=calibration_params, argv=list(sys.argv), zero_init=zero_init, load_dtype=load_dtype,
        trainable=trainable, final_save=final_save, offload_optimizer=offload_optimizer, seen_steady=seen_steady,
        load_onto=load_onto))
    output.render(fmt, estimateviews.show(data, fmt))
