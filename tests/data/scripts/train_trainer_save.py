"""The Hugging Face Trainer saving as jobs do: a checkpoint during training (save_strategy "steps": the Trainer's
_save_checkpoint, i.e. save_model's consolidated 16-bit weights, then DeepSpeed's save_checkpoint for the optimizer)
and the final trainer.save_model() after train(). A tiny Llama built from a config, random token ids, ZeRO with the
optimizer offloaded to the CPU; at ZeRO-3 stage3_gather_16bit_weights_on_model_save is on (else save_model writes
no weights). For the save phase's tests (tests/test_save_phase.py)."""

import argparse

import torch
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True, help="the Trainer's output_dir")
parser.add_argument("--stage", type=int, default=2)
parser.add_argument("--max_steps", type=int, default=2)
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()

VOCAB, SEQ = 4096, 16
zero = {"stage": args.stage, "offload_optimizer": {"device": "cpu"}}
if args.stage == 3:
    zero["offload_param"] = {"device": "cpu"}
    zero["stage3_gather_16bit_weights_on_model_save"] = True
ds_config = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "gradient_clipping": "auto", "steps_per_print": 10**9, "bf16": {"enabled": "auto"},
             "zero_optimization": zero,
             "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                       "weight_decay": "auto"}}}
training = TrainingArguments(output_dir=args.out, per_device_train_batch_size=2, max_steps=args.max_steps,
                             learning_rate=1e-4, bf16=True, use_cpu=True, deepspeed=ds_config, report_to=[],
                             save_strategy="steps", save_steps=args.max_steps, logging_steps=1, disable_tqdm=True,
                             dataloader_num_workers=0, seed=0)
config = AutoConfig.for_model("llama", vocab_size=VOCAB, hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                              tie_word_embeddings=False)
model = AutoModelForCausalLM.from_config(config)


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


trainer = Trainer(model=model, args=training, train_dataset=RandomTokens())
trainer.train()
trainer.save_model()  # the final save
