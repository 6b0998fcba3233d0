"""A small DeepSpeed script that misbehaves on request, for the script runner's tests (tests/test_script.py):
it raises at an optimizer step, raises KeyboardInterrupt itself, raises before deepspeed.initialize, exits with a
code, never initializes, initializes twice, or saves a checkpoint, and otherwise trains 2 x Linear(256, 256) like
any DeepSpeed user's loop."""

import argparse
import sys

import deepspeed
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--raise-at", type=int)
parser.add_argument("--interrupt-at", type=int, help="raise KeyboardInterrupt itself at this step")
parser.add_argument("--raise-before-init", action="store_true")
parser.add_argument("--stage", type=int, default=2)
parser.add_argument("--exit-code", type=int)
parser.add_argument("--no-init", action="store_true")
parser.add_argument("--init-twice", action="store_true")
parser.add_argument("--checkpoint", help="save_checkpoint into this directory after step 1")
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()

CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "steps_per_print": 10**9,
          "bf16": {"enabled": True},
          "zero_optimization": {"stage": args.stage, "offload_optimizer": {"device": "cpu"}},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}


def engine_for(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=CONFIG)
    return engine


if args.raise_before_init:
    raise ValueError("no data found")  # before deepspeed.initialize: the engine's stage is never known
if args.no_init:
    print("this script trains nothing")
    sys.exit(0)
engine = engine_for(0)
x = torch.randn(2, 256, dtype=torch.bfloat16, device=engine.device)
for step in range(1, args.steps + 1):
    loss = engine(x).float().pow(2).mean()
    engine.backward(loss)
    if step == args.raise_at:
        raise RuntimeError(f"the loss went wrong at step {step}")  # the line a failed run names
    if step == args.interrupt_at:
        raise KeyboardInterrupt  # the script's own, not a Ctrl-C
    engine.step()
    if args.checkpoint and step == 1:
        engine.save_checkpoint(args.checkpoint, tag="after-step-1")
    if args.init_twice and step == 2:
        engine = engine_for(1)  # the old engine is dropped by the script: a re-initialisation
if args.exit_code is not None:
    sys.exit(args.exit_code)
