"""An accelerate custom training loop as accelerate's DeepSpeed guide writes one: the Accelerator with a
DeepSpeedPlugin (ZeRO-2, optimizer offloaded to the CPU), the tiny Llama prepare.py saved loaded with
`from_pretrained`, DeepSpeed's CPU Adam, batches of the local dataset's text.

    rssprobe run -- accelerate launch --multi_gpu --num_processes 2 loop.py --inputs DIR
"""

import argparse
import json
from pathlib import Path

import torch
from accelerate import Accelerator, DeepSpeedPlugin, PartialState
from deepspeed.ops.adam import DeepSpeedCPUAdam
from transformers import AutoModelForCausalLM, AutoTokenizer

parser = argparse.ArgumentParser()
parser.add_argument("--inputs", required=True, type=Path, help="prepare.py's output")
parser.add_argument("--stage", type=int, default=2)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()

plugin = DeepSpeedPlugin(zero_stage=args.stage, offload_optimizer_device="cpu", gradient_clipping=1.0)
# without a GPU accelerate starts its process group only for a CPU state (else: one process, no backend), and an
# Accelerator told cpu=True drops DeepSpeed: the state first, as the HF Trainer does for use_cpu
PartialState(cpu=not torch.cuda.is_available())
accelerator = Accelerator(mixed_precision="bf16", deepspeed_plugin=plugin)
model = AutoModelForCausalLM.from_pretrained(args.inputs / "model")
tokenizer = AutoTokenizer.from_pretrained(args.inputs / "model")
texts = [json.loads(x)["text"] for x in (args.inputs / "data.jsonl").read_text(encoding="utf-8").splitlines()]
ids = tokenizer(texts[:64], truncation=True, max_length=16, padding="max_length", return_tensors="pt")["input_ids"]
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=2)
optimizer = DeepSpeedCPUAdam(model.parameters(), lr=1e-4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
model.train()
for step, (batch,) in enumerate(loader):
    if step == args.steps:
        break
    loss = model(input_ids=batch, labels=batch).loss
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    accelerator.print(f"step {step + 1} loss {loss.item():.4f}")
