"""What the fine-tune scripts beside this file read, made here, offline: a byte-level BPE tokenizer trained on this
repository's own text (run_clm/prepare.py's), that text as a JSON-lines dataset (one record a line), and a tiny
Llama built from a config and saved as a checkpoint, so the scripts load it as users do (`from_pretrained`).

    python reports/your-job/finetune/prepare.py OUT

TRL, PEFT and accelerate are installed, never copied here (reports/your-job/evidence.sh says how).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

HERE = Path(__file__).resolve().parent
# a Llama of 2 layers, hidden 256, vocabulary 4096 (the tokenizer's), untied head: 3,572,992 parameters
SHAPE = {"vocab_size": 4096, "hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
         "tie_word_embeddings": False}


def main(out: Path) -> None:
    spec = importlib.util.spec_from_file_location("run_clm_prepare", HERE.parent / "run_clm" / "prepare.py")
    assert spec is not None and spec.loader is not None
    clm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(clm)
    clm.main(out / "text")  # tokenizer/ and train.txt
    lines = [x for x in (out / "text" / "train.txt").read_text(encoding="utf-8").splitlines() if len(x) > 40]
    with (out / "data.jsonl").open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps({"text": line}) + "\n")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **SHAPE))
    model.save_pretrained(out / "model")  # fp32 safetensors
    tok = AutoTokenizer.from_pretrained(out / "text" / "tokenizer")
    tok.pad_token = tok.eos_token
    tok.save_pretrained(out / "model")
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
