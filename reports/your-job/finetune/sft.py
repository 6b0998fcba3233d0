"""TRL's SFTTrainer as its documentation runs it, on the tiny Llama that prepare.py saved (`from_pretrained`) and
its local JSON-lines dataset, the Trainer's DeepSpeed config with the optimizer offloaded to the CPU (at ZeRO-3 the
parameters too); `--lora`: a PEFT LoRA adapter (r 8 on q_proj and v_proj) through SFTTrainer's peft_config.

    rssprobe run -- accelerate launch --multi_gpu --num_processes 2 sft.py --inputs DIR --out DIR [--stage 3 --lora]
"""

import argparse
from pathlib import Path

from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

parser = argparse.ArgumentParser()
parser.add_argument("--inputs", required=True, type=Path, help="prepare.py's output")
parser.add_argument("--out", required=True, help="the Trainer's output_dir")
parser.add_argument("--stage", type=int, default=2)
parser.add_argument("--lora", action="store_true")
parser.add_argument("--max_steps", type=int, default=4)
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()

zero = {"stage": args.stage, "offload_optimizer": {"device": "cpu"}}
if args.stage == 3:
    zero["offload_param"] = {"device": "cpu"}
ds_config = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "gradient_clipping": "auto", "steps_per_print": 10**9, "bf16": {"enabled": "auto"},
             "zero_optimization": zero,
             "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                       "weight_decay": "auto"}}}
# the config first: at ZeRO-3 from_pretrained then builds the model partitioned (zero.Init)
config = SFTConfig(output_dir=args.out, per_device_train_batch_size=2, max_steps=args.max_steps, learning_rate=1e-4,
                   bf16=True, use_cpu=True, deepspeed=ds_config, report_to=[], save_strategy="no", logging_steps=1,
                   disable_tqdm=True, max_length=16, dataset_text_field="text", dataloader_num_workers=0, seed=0)
model = AutoModelForCausalLM.from_pretrained(args.inputs / "model")
tokenizer = AutoTokenizer.from_pretrained(args.inputs / "model")
dataset = load_dataset("json", data_files=str(args.inputs / "data.jsonl"), split="train")
peft_config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM") \
    if args.lora else None
trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                     peft_config=peft_config)
trainer.train()
