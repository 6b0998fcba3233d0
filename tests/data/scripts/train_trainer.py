"""The Hugging Face Trainer (through accelerate) training a tiny causal LM with a DeepSpeed config, as users of
transformers train: random weights from a config, random token ids, ZeRO with the optimizer offloaded to the CPU.
For the script runner's tests: gradient accumulation is accelerate's (engine.step at the boundary only)."""

import argparse

import torch
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True, help="the Trainer's output_dir (nothing is saved there)")
parser.add_argument("--stage", type=int, default=2)
parser.add_argument("--grad_accum", type=int, default=2)
parser.add_argument("--max_steps", type=int, default=3)
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--from_pretrained", help="load the model from this checkpoint instead of building it")
parser.add_argument("--args_after_model", action="store_true",
                    help="make TrainingArguments(deepspeed=...) after the model (FAI-RL #68's order: no zero.Init)")
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()

VOCAB, SEQ = 4096, 16
zero = {"stage": args.stage, "offload_optimizer": {"device": "cpu"}}
if args.stage == 3:
    zero["offload_param"] = {"device": "cpu"}
ds_config = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "gradient_clipping": "auto", "steps_per_print": 10**9, "bf16": {"enabled": "auto"},
             "zero_optimization": zero,
             "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                       "weight_decay": "auto"}}}


def training_arguments() -> TrainingArguments:
    return TrainingArguments(output_dir=args.out, per_device_train_batch_size=2, max_steps=args.max_steps,
                             gradient_accumulation_steps=args.grad_accum, learning_rate=1e-4, bf16=True, use_cpu=True,
                             deepspeed=ds_config, report_to=[], save_strategy="no", logging_steps=1,
                             disable_tqdm=True, dataloader_num_workers=0, seed=0)


training = None if args.args_after_model else training_arguments()  # at ZeRO-3: zero.Init in from_pretrained
if args.from_pretrained:
    model = AutoModelForCausalLM.from_pretrained(args.from_pretrained)
else:
    config = AutoConfig.for_model("llama", vocab_size=VOCAB, hidden_size=256, intermediate_size=704,
                                  num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=64, tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(config)
training = training or training_arguments()


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


Trainer(model=model, args=training, train_dataset=RandomTokens()).train()
