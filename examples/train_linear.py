"""A plain DeepSpeed training script: the `tiny` scenario (4 x Linear(1024, 1024) with ReLU, bf16, ZeRO-2 with
the optimizer offloaded to the CPU) written as a DeepSpeed user would, with its own argparse and a JSON
DeepSpeed config. Runs on its own (`deepspeed examples/train_linear.py`, or `python` for one rank) and under
rssprobe unmodified:

    rssprobe run --script examples/train_linear.py -- --deepspeed_config examples/ds_config_linear.json
"""

import argparse
import json
from pathlib import Path

import deepspeed
import torch


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gradient_accumulation_steps", type=int, help="overrides the DeepSpeed config's")
    parser.add_argument("--local_rank", type=int, default=-1, help="set by DeepSpeed's launcher")
    parser = deepspeed.add_config_arguments(parser)  # --deepspeed, --deepspeed_config
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    config_path = args.deepspeed_config or Path(__file__).with_name("ds_config_linear.json")
    config = json.loads(Path(config_path).read_text())
    if args.gradient_accumulation_steps:
        config["gradient_accumulation_steps"] = args.gradient_accumulation_steps

    deepspeed.init_distributed()
    torch.manual_seed(args.seed)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)

    engine, _optimizer, _loader, _scheduler = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                                   config=config)
    x = torch.randn(config["train_micro_batch_size_per_gpu"], args.width, dtype=torch.bfloat16, device=engine.device)
    for step in range(args.steps):
        for _micro in range(engine.gradient_accumulation_steps()):
            loss = engine(x).float().pow(2).mean()
            engine.backward(loss)
            engine.step()
        if engine.global_rank == 0:
            print(f"step {step + 1}: loss {loss.item():.6f}", flush=True)


if __name__ == "__main__":
    main()
