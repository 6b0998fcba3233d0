"""The job as a trainer runs it: what decides host RAM besides the model and ZeRO, with HF Trainer's and
accelerate's defaults, resolved from `estimate`'s options and said in the answer's assumptions.

* zero.Init: at ZeRO-3 HF Trainer and accelerate make the DeepSpeed config (HfDeepSpeedConfig) before
  `from_pretrained`, which then builds the model under `deepspeed.zero.Init`: each rank holds its partition, never
  the whole model. On for a transformers model at ZeRO-3 unless --no-zero-init; rssprobe's own Linear stack is built
  whole (off); below ZeRO-3 there is no zero.Init.
* the load dtype: Trainer jobs call `from_pretrained(..., torch_dtype=torch.bfloat16)` (or "auto": a published
  checkpoint's bf16), so a rank that loads the whole model holds 2 bytes a parameter, not the 4 of an fp32 build.
  bf16 for a transformers model unless --load-dtype fp32; the Linear stack is built in fp32.
* where the weights load: without a device_map (HF Trainer, accelerate, LLaMA-Factory) `from_pretrained` puts the
  whole model in host RAM and deepspeed.initialize moves it; ms-swift passes device_map="cuda:LOCAL_RANK" below
  ZeRO-3 (its get_default_device_map), so each tensor passes through host memory on its way to the GPU and no whole
  copy is ever held there (--load-onto device: CUDA, without zero.Init).
* the trainable fraction: the Trainer hands the optimizer the parameters that require grad; with an adapter
  (--trainable 0.5%, or a count) the fp32 master, its gradient and Adam's states hold those only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UserError
from .sizes import count as parse_count
from .sizes import format_count

LOAD_DTYPES = {"bf16": 2, "fp32": 4}
FINAL_SAVES = ("model16", "checkpoint", "none")  # --final-save (module docstring)
LOAD_ONTO = ("host", "device")  # --load-onto (module docstring)


@dataclass(frozen=True)
class TrainerJob:
    """The resolved assumptions (each with whether the user gave it or it is the trainer's default)."""

    zero_init: bool
    zero_init_given: bool
    load_dtype: str
    load_given: bool
    trainable: float  # fraction of the parameters that train
    trainable_params: int
    final_save: str = "model16"
    final_save_given: bool = False
    load_onto: str = "host"  # "device": from_pretrained with device_map onto the rank's GPU
    load_onto_given: bool = False

    @property
    def load_bytes(self) -> int:
        return LOAD_DTYPES[self.load_dtype]

    def assumptions(self, stage: int, offload_optimizer: bool, offload_param: bool, kind: str) -> list[str]:
        """One line per assumption, the option that changes it named."""
        said = {True: "as given", False: "HF Trainer / accelerate's default"}
        out = []
        if stage == 3:
            out.append(f"zero.Init {'on' if self.zero_init else 'off'} ({said[self.zero_init_given]}"
                       + ("" if self.zero_init_given or kind == "transformers" else ": rssprobe builds its Linear "
                          "stack whole") + "): "
                       + ("each rank builds or loads only its partition" if self.zero_init
                          else "each rank holds the whole model until deepspeed.initialize partitions it")
                       + f"; {'--no-zero-init' if self.zero_init else '--zero-init'} for the other")
        else:
            out.append(f"zero.Init: none at ZeRO-{stage} (each rank holds the whole model until deepspeed.initialize"
                       " partitions it)")
        out.append(f"the model loaded in {self.load_dtype} ("
                   + ("from_pretrained(torch_dtype=torch.bfloat16), " if self.load_dtype == "bf16" and
                      kind == "transformers" else "")
                   + f"{said[self.load_given]}"
                   + ("" if self.load_given or kind == "transformers" else ": rssprobe builds its Linear stack in fp32")
                   + f"; --load-dtype {'fp32' if self.load_dtype == 'bf16' else 'bf16'} for the other)")
        if kind == "transformers" and not (stage == 3 and self.zero_init):
            out.append("the weights loaded onto "
                       + ("the host (from_pretrained without a device_map, "
                          + ("as given" if self.load_onto_given else "HF Trainer's, accelerate's, LLaMA-Factory's")
                          + "): every rank holds the whole model until deepspeed.initialize moves it; --load-onto "
                          "device for device_map=\"cuda:LOCAL_RANK\" (ms-swift below ZeRO-3)"
                          if self.load_onto == "host" else
                          "the device (device_map=\"cuda:LOCAL_RANK\", as given: ms-swift's below ZeRO-3): a tensor "
                          "at a time passes through host memory, no whole copy is held there; --load-onto host "
                          "for the other"))
        out.append(f"optimizer states {'offloaded to host RAM' if offload_optimizer else 'on the device'}, parameters "
                   + ("offloaded" if offload_param else "on the device") + " (--offload-param / --no-offload-param"
                   + ", --offload-optimizer / --no-offload-optimizer)")
        out.append("all parameters train (--trainable 0.5% or a count for an adapter)" if self.trainable >= 1.0 else
                   f"{format_count(self.trainable_params)} parameters train ({self.trainable:.3%}): the optimizer's "
                   "fp32 master, gradients and Adam states hold those only (predicted)")
        out.append(self.final_save_line(stage))
        return out

    def final_save_line(self, stage: int) -> str:
        """What the job's final save is, and the option that says otherwise."""
        said = "as given" if self.final_save_given else \
            "HF Trainer's save_model with the published ZeRO configs (HF's, LLaMA-Factory's, ms-swift's)"
        if self.final_save == "model16":
            what = ("the consolidated 16-bit model, gathered on rank 0 (stage3_gather_16bit_weights_on_model_save "
                    "true)" if stage == 3 else "the consolidated 16-bit model, cloned to host on every rank "
                    "(accelerate's get_state_dict)")
            other = ("--final-save checkpoint when the config sets stage3_gather_16bit_weights_on_model_save false "
                     "(DeepSpeed's default), none for no final save" if stage == 3 else
                     "--final-save checkpoint for a job that saves with save_checkpoint alone, none for no final "
                     "save")
        elif self.final_save == "checkpoint":
            what = ("DeepSpeed's save_checkpoint (stage3_gather_16bit_weights_on_model_save false: the Trainer "
                    "saves the full checkpoint instead, no 16-bit model gathered)" if stage == 3 else
                    "DeepSpeed's save_checkpoint alone (no 16-bit model cloned)")
            other = "--final-save model16 for the consolidated 16-bit model, none for no final save"
        else:
            what = "none (the job saves no final model)"
            other = "--final-save model16 or checkpoint for a job that saves"
        return f"the final save: {what} ({said}; {other})"


def parse_trainable(text: str | None, params: int) -> tuple[float, int]:
    """--trainable: a percentage ("0.5%") or a count ("40M"); (fraction, parameters). UserError when neither."""
    if text is None:
        return 1.0, params
    raw = text.strip()
    try:
        if raw.endswith("%"):
            pct = float(raw[:-1])
            count = round(params * pct / 100) if math.isfinite(pct) else -1
        else:
            count = int(parse_count(raw))
    except (ValueError, OverflowError):
        raise UserError(f"--trainable {text}: a percentage (0.5%) or a parameter count (40M)") from None
    if not 1 <= count <= params:
        raise UserError(f"--trainable {text}: {count:,} trainable parameters, outside 1 to the model's {params:,}")
    return count / params, count


def resolve(zero_init: bool | None, load_dtype: str | None, trainable: str | None, stage: int, kind: str,
            params: int, final_save: str | None = None, load_onto: str | None = None,
            accelerator: str = "cuda") -> TrainerJob:
    """The job's assumptions from the options (None: the trainer's default for this model and stage)."""
    if zero_init and stage != 3:
        raise UserError(f"--zero-init: deepspeed.zero.Init partitions the model at ZeRO stage 3 only (the target is "
                        f"ZeRO-{stage}; --stage 3 --zero-init)")
    if load_dtype is not None and load_dtype not in LOAD_DTYPES:
        raise UserError(f"--load-dtype {load_dtype}: one of {', '.join(LOAD_DTYPES)}")
    if load_dtype is not None and kind != "transformers":
        raise UserError(f"--load-dtype {load_dtype}: rssprobe builds its Linear stack in fp32; the load dtype is "
                        "a transformers model's (--model, --hf-config or a scenario of kind \"transformers\")")
    if final_save is not None and final_save not in FINAL_SAVES:
        raise UserError(f"--final-save {final_save}: one of {', '.join(FINAL_SAVES)}")
    fraction, count = parse_trainable(trainable, params)
    init = (stage == 3 and kind == "transformers") if zero_init is None else zero_init
    if load_onto is not None and load_onto not in LOAD_ONTO:
        raise UserError(f"--load-onto {load_onto}: one of {', '.join(LOAD_ONTO)}")
    if load_onto == "device":
        if accelerator == "cpu":
            raise UserError("--load-onto device: a CPU target has no device; the model loads into host RAM")
        if kind != "transformers":
            raise UserError("--load-onto device: rssprobe builds its Linear stack in host RAM; where the weights "
                            "load is a transformers model's (--model, --hf-config or a scenario of kind "
                            "\"transformers\")")
        if stage == 3 and init:
            raise UserError("--load-onto device: under zero.Init each rank loads only its partition and no "
                            "device_map is passed (transformers refuses one there); --no-zero-init for a ZeRO-3 job "
                            "that loads onto the GPU first")
    return TrainerJob(zero_init=init,
                      zero_init_given=zero_init is not None,
                      load_dtype=load_dtype or ("bf16" if kind == "transformers" else "fp32"),
                      load_given=load_dtype is not None, trainable=fraction, trainable_params=count,
                      final_save=final_save or "model16", final_save_given=final_save is not None,
                      load_onto=load_onto or "host", load_onto_given=load_onto is not None)
