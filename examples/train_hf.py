"""A DeepSpeed training script for a Hugging Face causal language model built from a config (random weights:
nothing is downloaded), with gradient accumulation from the DeepSpeed config (4 micro-batches an optimizer step
in ds_config_hf.json). Trains on random token ids with the model's own language-model loss.

    rssprobe run --script examples/train_hf.py -- --deepspeed_config examples/ds_config_hf.json
    rssprobe run --script examples/train_hf.py -- --model_type gpt2 --hidden_size 256 --layers 2
"""

import argparse
import json
from pathlib import Path

import deepspeed
import torch
from transformers import AutoConfig, AutoModelForCausalLM


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_type", default="llama")
    parser.add_argument("--hidden_size", type=int, default=512)
    parser.add_argument("--intermediate_size", type=int, default=1408)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv_heads", type=int, default=2)
    parser.add_argument("--vocab_size", type=int, default=16384)
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--local_rank", type=int, default=-1, help="set by DeepSpeed's launcher")
    parser = deepspeed.add_config_arguments(parser)  # --deepspeed, --deepspeed_config
    return parser.parse_args()


def model_config(args: argparse.Namespace):
    if args.model_type == "gpt2":
        return AutoConfig.for_model("gpt2", n_embd=args.hidden_size, n_layer=args.layers, n_head=args.heads,
                                    vocab_size=args.vocab_size, n_positions=max(64, args.seq_len))
    return AutoConfig.for_model(args.model_type, hidden_size=args.hidden_size, intermediate_size=args.intermediate_size,
                                num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                num_key_value_heads=args.kv_heads, vocab_size=args.vocab_size,
                                tie_word_embeddings=False)


def main() -> None:
    args = parse_args()
    config_path = args.deepspeed_config or Path(__file__).with_name("ds_config_hf.json")
    ds_config = json.loads(Path(config_path).read_text())

    deepspeed.init_distributed()
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_config(model_config(args))
    model.train()

    engine, _optimizer, _loader, _scheduler = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                                   config=ds_config)
    batch = ds_config["train_micro_batch_size_per_gpu"]
    for step in range(args.steps):
        for _micro in range(engine.gradient_accumulation_steps()):
            ids = torch.randint(0, args.vocab_size, (batch, args.seq_len), device=engine.device)
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
        if engine.global_rank == 0:
            print(f"step {step + 1}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
