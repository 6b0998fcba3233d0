"""What transformers' run_clm.py needs to run offline, made here: a byte-level BPE tokenizer trained on this
repository's own text, that text as the training file, and the Trainer's DeepSpeed configs (ZeRO-2 and ZeRO-3 with
the optimizer, and at ZeRO-3 the parameters, offloaded to the CPU; every Trainer-owned value "auto").

    python reports/your-job/run_clm/prepare.py OUT

run_clm.py itself is fetched, never copied here (reports/your-job/evidence.sh says from where).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[3]
VOCAB = 4096


def corpus() -> str:
    """The repository's markdown, in a fixed order: the same text, so the same tokenizer and batches, each time."""
    files = sorted([*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("reports/*.md")])
    return "\n".join(p.read_text(encoding="utf-8") for p in files)


def ds_config(stage: int) -> dict:
    zero: dict = {"stage": stage, "offload_optimizer": {"device": "cpu"}}
    if stage == 3:
        zero["offload_param"] = {"device": "cpu"}
    return {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto", "steps_per_print": 10**9, "bf16": {"enabled": "auto"},
            "zero_optimization": zero,
            "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                      "weight_decay": "auto"}}}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    text = corpus()
    (out / "train.txt").write_text(text, encoding="utf-8")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text.splitlines(), trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                            model_max_length=512).save_pretrained(out / "tokenizer")
    for stage in (2, 3):
        (out / f"ds_zero{stage}.json").write_text(json.dumps(ds_config(stage), indent=2) + "\n")
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
