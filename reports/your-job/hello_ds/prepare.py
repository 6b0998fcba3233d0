"""What DeepSpeedExamples' training/HelloDeepSpeed/train_bert_ds.py needs to run offline, made here: the Hub's
`wikitext` (config wikitext-2-v1, split train) as a local stand-in in a datasets cache (this repository's markdown,
one line a record, cached where `datasets` looks offline: HF_DATASETS_CACHE=OUT/datasets), and a RoBERTa-like
byte-level BPE tokenizer (<s>=0, <pad>=1, </s>=2, <unk>=3, <mask>) for its --tokenizer option.

    python reports/your-job/hello_ds/prepare.py OUT

Only the text differs from the Hub's: the script loads the dataset by its own name, builds its own model (a RoBERTa
of vocabulary 50,265 whatever the tokenizer) and masks as written. train_bert_ds.py itself is fetched, never copied
here (reports/your-job/evidence.sh says from where).
"""

from __future__ import annotations

import sys
from pathlib import Path

import datasets
from datasets.arrow_writer import ArrowWriter
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[3]
SPECIAL = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa's ids 0-3 (the script's config: pad 1, eos 2)


def lines() -> list[str]:
    """The repository's markdown, in a fixed order, one record a line with its newline, a blank line "" (as
    wikitext's records are: the script drops "" and strips the newline, so no record it keeps is empty)."""
    files = sorted([*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("reports/*.md")])
    return [line if line.strip() else "" for p in files
            for line in p.read_text(encoding="utf-8").splitlines(keepends=True)]


def wikitext(records: list[str], cache: Path) -> Path:
    """The stand-in as the datasets cache holds a built dataset: <cache>/wikitext/wikitext-2-v1/0.0.0/<hash>/ with
    its Arrow file and dataset_info.json (what `load_dataset("wikitext", "wikitext-2-v1")` reads offline)."""
    ds = datasets.Dataset.from_dict({"text": records})
    target = cache / "wikitext" / "wikitext-2-v1" / "0.0.0" / "standin"
    target.mkdir(parents=True, exist_ok=True)
    with ArrowWriter(path=str(target / "wikitext-train.arrow"), features=ds.features) as writer:
        for row in ds:
            writer.write(row)
        n, nbytes = writer.finalize()
    datasets.DatasetInfo(features=ds.features, config_name="wikitext-2-v1", dataset_name="wikitext",
                         builder_name="wikitext", version="0.0.0",
                         splits=[{"name": "train", "num_bytes": nbytes, "num_examples": n,
                                  "dataset_name": "wikitext"}]).write_to_directory(str(target))
    return target


def tokenizer(records: list[str], out: Path) -> None:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(records, trainers.BpeTrainer(vocab_size=8192, special_tokens=SPECIAL,
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>", mask_token="<mask>", cls_token="<s>", sep_token="</s>",
                            model_max_length=512).save_pretrained(out)


def main(out: Path) -> None:
    records = lines()
    wikitext(records, out / "datasets")
    tokenizer(records, out / "tokenizer")
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
