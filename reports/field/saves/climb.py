"""Does host RSS climb save after save (ms-swift #6473: RAM "continuously climbs" and the job dies at its final save)?

HF Trainer, ZeRO-2, optimizer offloaded, a checkpoint every 2 steps (save_model's 16-bit clone on every rank, then
save_checkpoint), then the final save_model; glibc's defaults (no mmap threshold fixed). Each rank writes its RSS
after every step and save, and its high-water mark (VmHWM) after each save, to OUT/rss-RANK.json (reports/field.md).
"""

import argparse
import json
import os

import torch
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--steps", type=int, default=12)
p.add_argument("--every", type=int, default=2)
p.add_argument("--hidden", type=int, default=1024)
p.add_argument("--layers", type=int, default=6)
p.add_argument("--local_rank", type=int, default=-1)
a = p.parse_args()


def status(key: str) -> int:
    """A /proc/self/status figure in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


zero = {"stage": 2, "offload_optimizer": {"device": "cpu"}}
ds = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
      "steps_per_print": 10**9, "bf16": {"enabled": "auto"}, "zero_optimization": zero,
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}}
args = TrainingArguments(output_dir=a.out, per_device_train_batch_size=1, max_steps=a.steps, learning_rate=1e-4,
                         bf16=True, use_cpu=True, deepspeed=ds, report_to=[], save_strategy="steps",
                         save_steps=a.every, save_total_limit=2, logging_steps=10**6, disable_tqdm=True,
                         dataloader_num_workers=0, seed=0)
cfg = AutoConfig.for_model("llama", vocab_size=4096, hidden_size=a.hidden, intermediate_size=int(a.hidden * 2.75),
                           num_hidden_layers=a.layers, num_attention_heads=8, num_key_value_heads=4,
                           max_position_embeddings=64, tie_word_embeddings=False)
model = AutoModelForCausalLM.from_config(cfg)
n = sum(t.numel() for t in model.parameters())


class Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10**6

    def __getitem__(self, i: int) -> dict:
        x = torch.randint(0, 4096, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": x, "labels": x}


log: list = []


class Record(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
        log.append({"at": "step", "step": state.global_step, "rss": status("VmRSS")})

    def on_save(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
        log.append({"at": "save", "step": state.global_step, "rss": status("VmRSS"), "hwm": status("VmHWM")})


trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Record()])
trainer.train()
log.append({"at": "after_train", "step": a.steps, "rss": status("VmRSS"), "hwm": status("VmHWM")})
trainer.save_model()
log.append({"at": "final_save", "step": a.steps, "rss": status("VmRSS"), "hwm": status("VmHWM")})
with open(os.path.join(a.out, f"rss-{os.environ.get('RANK', '0')}.json"), "w") as f:
    json.dump({"params": n, "ranks": int(os.environ.get("WORLD_SIZE", "1")), "steps": a.steps, "every": a.every,
               "log": log}, f, indent=1)
