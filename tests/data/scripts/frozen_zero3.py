"""A LoRA-shaped fine-tune without PEFT: a tiny base (4 x Linear(512, 512)) frozen by hand (requires_grad False)
and a rank-8 adapter per layer trained, at ZeRO-3 with the optimizer and parameters offloaded, bf16. The known
answer: trainable = 4 x (512 x 8 + 8 x 512) = 32,768 of 1,083,392 parameters (3.02%); the frozen base's bf16
partitions are the role frozen_partitions, not `other`. --stage 2 runs the same at ZeRO-2 with accelerate's
plugin-style config (offload_param device "none")."""

import argparse

import deepspeed
import torch


class Adapted(torch.nn.Module):
    def __init__(self, width: int, rank: int) -> None:
        super().__init__()
        self.base = torch.nn.Linear(width, width)
        self.down = torch.nn.Linear(width, rank, bias=False)
        self.up = torch.nn.Linear(rank, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.base(x) + self.up(self.down(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    zero = {"stage": args.stage, "offload_optimizer": {"device": "cpu"},
            "offload_param": {"device": "cpu" if args.stage == 3 else "none"}}
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "steps_per_print": 10**9,
              "bf16": {"enabled": True}, "zero_optimization": zero,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    deepspeed.init_distributed()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Adapted(512, 8) for _ in range(4)])
    for layer in model:
        layer.base.requires_grad_(False)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
                                      config=config)
    x = torch.randn(2, 512, dtype=torch.bfloat16, device=engine.device)
    for _ in range(args.steps):
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        engine.step()


if __name__ == "__main__":
    main()
