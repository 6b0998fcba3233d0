"""Scenario files: a validated TOML schema, packaged defaults, and --set overrides.

A scenario is data: everything a run does (model size, precision, ZeRO config, probes,
patch set) is declared here, so two runs of one scenario differ only by what the command
line says (label, patches, allocator), and the manifest can record it whole.
"""

from __future__ import annotations

import copy
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..contract.files import INRUN_EVENTS, MAX_WORLD_SIZE, SAVE_AT_END
from ..contract.workerscenario import DEFAULT_ZERO_STAGE
from ..errors import UserError, did_you_mean, from_validation
from ..store import outputs
from ..store.reader import loads_toml, read_text
from . import hfconfig
from .script import check_file, check_overrides, raw_scenario
from .torch_alloc_conf import split as split_alloc_conf


class _Strict(BaseModel):
    # an unknown key is refused, and so is nan or an infinity in any number (nan passes every range check); values
    # are taken as they are typed, never coerced (strict): "yes" is not true, "4" is not 4, 1.5 is not an int, true is
    # not 1. Numbers are numbers as TOML writes them: an int is a float (timeout_s = 900), and a whole float is an
    # int (micro_batch = 1e8, how a count is written short).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _whole_float_is_an_int(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, float) and v.is_integer() and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            kinds = set(get_args(annotation)) or {annotation}
            if int in kinds and float not in kinds:
                return int(v)
        return v


LINEAR_ONLY = ("layers", "width", "param_groups", "activation", "activation_checkpointing")


class FromPretrained(_Strict):
    """How a transformers model is loaded from its checkpoint (model.load = "checkpoint"): the checkpoint is the
    configured model with random weights, written once with save_pretrained (cached by shape under the cache root,
    run/checkpoints.py), and loaded with from_pretrained offline in every run (worker/loading.py)."""

    dtype_on_disk: Literal["bf16", "fp32"] = Field("fp32", description="the checkpoint's tensors on disk")
    format: Literal["safetensors", "bin"] = Field("safetensors", description="save_pretrained's safe_serialization")
    shards: int = Field(4, gt=0, le=1000, description="files the checkpoint is cut into (max_shard_size = its bytes "
                                                       "/ shards), as real checkpoints are sharded")
    torch_dtype: Literal["auto", "bf16", "fp32"] = Field("auto", description="from_pretrained's dtype (auto: the "
                                                                               "checkpoint's)")
    low_cpu_mem_usage: bool = Field(False, description="from_pretrained's low_cpu_mem_usage (transformers >= 5 "
                                                       "ignores it: always low; 4.x refuses it with ZeRO-3 and needs "
                                                       "accelerate for it)")
    hf_ds_config: Literal["before", "after"] = Field(
        "before", description="the Hugging Face DeepSpeed config (HfDeepSpeedConfig, what TrainingArguments(deepspeed="
                              "...) makes) made before from_pretrained (at ZeRO-3: zero.Init partitions during the "
                              "load) or after it (every rank loads the whole model: FAI-RL #68's order)")


DEFAULT_SEQ_LEN = 128  # kind transformers: tokens per sample unless model.seq_len says


class Model(_Strict):
    """A synthetic MLP of square Linear layers, sized by parameter count or by layers x width (kind linear);
    a Hugging Face causal LM built from a config (kind transformers, config/hfconfig.py); or a script's own."""

    kind: Literal["linear", "transformers", "script"] = Field(
        "linear", description="linear: Linear layers; transformers: AutoModelForCausalLM.from_config([model.hf]); "
                              "script: the model a --script builds (nothing else here)")
    hf: dict[str, Any] | None = Field(None, description="kind transformers: transformers.AutoConfig.for_model "
                                                        "keyword arguments (model_type, hidden_size, ...)")
    seq_len: int | None = Field(None, gt=0, description="kind transformers: tokens per sample (random ids; "
                                                       f"default {DEFAULT_SEQ_LEN})")
    params: float | None = Field(None, gt=0, description="target parameter count (sets layers; transformers: "
                                                         "num_hidden_layers, the other dimensions kept)")
    layers: int | None = Field(None, gt=0)
    width: int = Field(1024, gt=0)
    param_groups: int = Field(1, gt=0, description="optimizer param groups (layers split round-robin)")
    activation: Literal["relu", "gelu", "silu", "tanh", "none"] = Field(
        "relu", description="nonlinearity between the Linear layers (torch.nn)")
    activation_checkpointing: Literal["non_reentrant", "reentrant", False] = Field(
        False, description="torch.utils.checkpoint around each layer (its activation recomputed in backward)")
    load: Literal["config", "checkpoint"] = Field(
        "config", description="kind transformers: build from the config (random weights), or load a checkpoint of "
                              "that model with from_pretrained (a load phase before initialize; "
                              "[model.from_pretrained])")
    from_pretrained: FromPretrained | None = Field(None, description="model.load = \"checkpoint\": how it loads")

    # kind transformers: what config/hfconfig.py resolved from the config (layers, params, tensors)
    _resolved: dict[str, int] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _one_size(self) -> Model:
        if self.kind != "linear":
            return self._not_linear()
        for key in ("hf", "seq_len", "from_pretrained"):
            if getattr(self, key) is not None:
                raise ValueError(f"{key} applies to kind = \"transformers\" (this model is kind = \"linear\")")
        if self.load != "config":
            raise ValueError("load applies to kind = \"transformers\" (this model is kind = \"linear\")")
        if (self.params is None) == (self.layers is None):
            raise ValueError("give exactly one of model.params or model.layers")
        if self.n_layers > hfconfig.MAX_LAYERS:
            given = f"model.params {self.params:g} needs" if self.layers is None else "model.layers:"
            raise ValueError(f"{given} {self.n_layers:,} layers of width {self.width} (at most "
                             f"{hfconfig.MAX_LAYERS:,})")
        if self.param_groups > self.n_layers:
            raise ValueError(f"param_groups ({self.param_groups}) exceeds the number of layers ({self.n_layers})")
        return self

    def _not_linear(self) -> Model:
        if self.kind != "transformers" and (self.load != "config" or self.from_pretrained is not None):
            raise ValueError(f"load applies to kind = \"transformers\" (this model is kind = \"{self.kind}\")")
        if self.load == "checkpoint" and self.from_pretrained is None:
            self.from_pretrained = FromPretrained()
        if self.load == "config" and self.from_pretrained is not None:
            raise ValueError("[model.from_pretrained] needs model.load = \"checkpoint\"")
        given = [k for k in LINEAR_ONLY if k in self.model_fields_set]
        if given:
            raise ValueError(f"{given[0]} applies to kind = \"linear\" (this model is kind = \"{self.kind}\")")
        if self.kind == "script":
            extra = [k for k in ("hf", "seq_len", "params") if k in self.model_fields_set]
            if extra:
                raise ValueError(f"{extra[0]}: a script builds its own model; rssprobe sets nothing of it")
        elif not self.hf:
            raise ValueError("kind = \"transformers\" needs [model.hf] (model_type and the config's keyword arguments)")
        elif self.seq_len is None:  # decided here, where the schema is: the worker applies no default of its own
            self.seq_len = DEFAULT_SEQ_LEN
        return self

    @property
    def n_layers(self) -> int:
        if self.kind != "linear":
            return (self._resolved or {}).get("layers", 0)
        if self.layers is not None:
            return self.layers
        return max(1, round(float(self.params or 0) / (self.width * self.width + self.width)))

    @property
    def n_params(self) -> int:
        if self.kind != "linear":
            return (self._resolved or {}).get("params", 0)
        return self.n_layers * (self.width * self.width + self.width)


# ZeRO-3 knobs that decide how much is gathered at once: passed to DeepSpeed as given, and only at stage 3
# (stages 1 and 2 have no gathered parameters, so a value there would silently mean nothing: refused).
STAGE3_KNOBS = ("stage3_max_live_parameters", "stage3_prefetch_bucket_size", "stage3_max_reuse_distance",
                "stage3_param_persistence_threshold")


class Zero(_Strict):
    stage: int = DEFAULT_ZERO_STAGE
    offload_optimizer: Literal["cpu"] = "cpu"
    offload_param: Literal["cpu"] | None = Field(None, description="stage 3 only: partitioned bit16 params on the CPU")
    pin_memory: bool | None = Field(
        None, description="offload_optimizer/offload_param pin_memory; unset (or \"default\"): DeepSpeed's own default "
                          "(false before 0.19.5, true from it)")
    contiguous_gradients: bool = True
    overlap_comm: bool = False
    reduce_bucket_size: int = Field(500_000_000, gt=0)
    allgather_bucket_size: int = Field(500_000_000, gt=0)
    gradient_clipping: float = Field(1.0, ge=0)
    stage3_max_live_parameters: int | None = Field(None, ge=0)
    stage3_prefetch_bucket_size: int | None = Field(None, ge=0)
    stage3_max_reuse_distance: int | None = Field(None, ge=0)
    stage3_param_persistence_threshold: int | None = Field(None, ge=0)

    @field_validator("pin_memory", mode="before")
    @classmethod
    def _pin_default(cls, v: Any) -> Any:
        return None if v == "default" else v

    @field_validator("stage")
    @classmethod
    def _stage(cls, v: int) -> int:
        if v not in (1, 2, 3):
            raise ValueError(f"ZeRO stage {v} does not exist; rssprobe measures stages 1, 2 and 3 with CPU "
                             "optimizer offload")
        return v

    @field_validator("reduce_bucket_size", "allgather_bucket_size", *STAGE3_KNOBS, mode="before")
    @classmethod
    def _int_from_float(cls, v: Any) -> Any:
        return int(v) if isinstance(v, float) and v.is_integer() else v

    @field_validator("offload_param", *STAGE3_KNOBS)
    @classmethod
    def _stage3_only(cls, v: Any, info: ValidationInfo) -> Any:
        stage = info.data.get("stage")  # validated before these (declared first); absent when it was refused
        if v is not None and stage is not None and stage != 3:
            raise ValueError(f"applies to ZeRO stage 3 only (this scenario is stage {stage})")
        return v

    def pinning(self) -> dict[str, bool]:
        """The offload tables' pin_memory, absent when unset (DeepSpeed then applies its own default)."""
        return {} if self.pin_memory is None else {"pin_memory": self.pin_memory}


class Optimizer(_Strict):
    type: Literal["Adam", "AdamW"] = "AdamW"
    lr: float = Field(1e-4, gt=0)
    # a TOML (or stored JSON) array is a list: the pair is taken from one (strict=False), its numbers still strictly
    betas: tuple[Annotated[float, Field(ge=0, lt=1, strict=True)], Annotated[float, Field(ge=0, lt=1, strict=True)]] \
        = Field((0.9, 0.999), strict=False)
    eps: float = Field(1e-8, gt=0)
    weight_decay: float = Field(0.0, ge=0)


class Probes(_Strict):
    sites: Literal["default", "none"] = "default"
    extra_sites: list[str] = Field(default_factory=list, description="more dotted paths; must exist")
    trace_sites: list[str] = Field(default_factory=list, description="sites that also log every call")
    parts: bool = Field(True, description="exact peak of forward / backward / optimizer inside each step")
    census: bool = True
    memmap: bool = Field(True, description="at each census, name every resident byte by memory mapping")
    smaps: bool = True
    trim_at_end: bool = Field(False, description="malloc_trim(0) after the final census and record what it frees")
    steady_sites: Literal["light", "full"] = Field(
        "light", description="site probes from step 2 on. light: the sites called once per parameter tensor "
                             "(data/sites.toml) pass through and the others read RSS and the exact peak, not "
                             "glibc's counters (mallinfo2, ~40 us a read in training); full: every call, every "
                             "figure (probes ~3% of a step on `default` instead of ~0.5%)")
    alternate: bool = Field(False, description="make bench only: sites, sub-step peaks and smaps off on even steps "
                                               "(a paired probes on/off A/B inside one process)")


class Patches(_Strict):
    patched: list[str] = Field(default_factory=lambda: ["pr8132"], description="what --patched applies")


class Checkpoint(_Strict):
    """DeepSpeed's save_checkpoint after every `every`-th step, into the run directory (RUN/checkpoints/)."""

    every: int = Field(gt=0, description="save after steps every, 2 x every, ...")
    consolidate_16bit: bool = Field(False, description="also engine.save_16bit_model (ZeRO stage 3 only)")
    keep: int = Field(1, ge=0, description="newest tags kept on disk (0 = all), so long runs do not fill the disk")


class Eval(_Strict):
    """`forwards` forward passes through the engine under torch.no_grad() after every `every`-th step."""

    every: int = Field(gt=0)
    forwards: int = Field(1, gt=0)


class Reinit(_Strict):
    """Tear the engine down (every reference dropped, gc) and deepspeed.initialize a fresh model."""

    every: int = Field(gt=0)


class Save(_Strict):
    """Saves after the last step, each one measured save phase (worker/saves.py): what a job's final save holds.
    checkpoint: DeepSpeed's save_checkpoint (each rank's optimizer partition); model_16bit: the consolidated
    16-bit model as HF Trainer's save_model gets it under DeepSpeed, written by rank 0."""

    at_end: list[Literal[SAVE_AT_END]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(SAVE_AT_END), min_length=1, description="the saves after the last step, in order")
    keep: bool = Field(False, description="keep the saved files (RUN/checkpoints/final-KIND); else removed after")


EVENTS = INRUN_EVENTS  # the in-run events, in the order they run after a step


class Script(_Strict):
    """A user's DeepSpeed training script (rssprobe run --script PATH -- ARGS): config/script.py."""

    path: str
    sha256: str | None = None
    args: list[str] = Field(default_factory=list, description="its command line (sys.argv[1:])")
    stop_after: int | None = Field(None, gt=0, description="stop the script after N optimizer steps (--steps N)")
    command: list[str] = Field(default_factory=list, description="the user's own launch command as given (rssprobe "
                               "run -- deepspeed ... train.py ARGS): it starts the ranks; empty: rssprobe launches")


class Scenario(_Strict):
    name: str
    description: str = ""
    precision: Literal["bf16", "fp32", "fp16"] = "bf16"
    steps: int | None = Field(10, gt=0, description="optimizer steps (a script run: stop after N; unset: its own)")
    micro_batch: int = Field(4, gt=0)
    grad_accum_steps: int = Field(1, gt=0)
    seed: int = 0
    world_size: int = Field(1, gt=0, le=MAX_WORLD_SIZE,
                            description="ranks on this machine (torchrun); gloo on CPU, NCCL on GPUs")
    torch_alloc_conf: str | None = Field(
        None, description="PYTORCH_CUDA_ALLOC_CONF for the worker (KEY:VALUE,...; --torch-alloc-conf); checked against "
                          "the worker's torch before any run")
    timeout_s: float = Field(900, gt=0)
    model: Model
    zero: Zero = Field(default_factory=Zero)
    optimizer: Optimizer = Field(default_factory=Optimizer)
    probes: Probes = Field(default_factory=Probes)
    patches: Patches = Field(default_factory=Patches)
    checkpoint: Checkpoint | None = None
    eval: Eval | None = None
    reinit: Reinit | None = None
    save: Save | None = None
    script: Script | None = None

    @field_validator("torch_alloc_conf")
    @classmethod
    def _alloc_conf(cls, v: str | None) -> str | None:
        if v is not None:
            split_alloc_conf(v)  # ValueError: not KEY:VALUE,...
        return v

    @model_validator(mode="after")
    def _events_fit(self) -> Scenario:
        if (self.script is None) != (self.model.kind != "script"):
            raise ValueError("model.kind = \"script\" and [script] go together (rssprobe run --script PATH)")
        if self.script is not None and self.script.command and self.world_size != 1:
            raise ValueError("world_size: the launcher in the command decides the ranks (rssprobe run -- LAUNCHER ...)")
        if self.steps is None and self.script is None:
            raise ValueError("steps: required (only a script run may leave the step count to the script)")
        if self.script is not None and self.steps is not None:  # a script's loop decides; steps = N stops it
            if "steps" in self.model_fields_set and self.script.stop_after is None:
                self.script.stop_after = self.steps
            self.steps = None
        for name in EVENTS:
            event = getattr(self, name)
            if event is not None and event.every > (self.steps or 0):
                raise ValueError(f"{name}.every ({event.every}) exceeds steps ({self.steps}): it would never run")
        if self.save is not None and self.script is not None:
            raise ValueError("[save] is for scenarios: a script's own saves are measured as they happen")
        if self.checkpoint is not None and self.checkpoint.consolidate_16bit and self.zero.stage < 3:
            raise ValueError("checkpoint.consolidate_16bit is for ZeRO stage 3 "
                             f"(this scenario: stage {self.zero.stage})")
        return self

    def deepspeed_config(self) -> dict[str, Any]:
        """The DeepSpeed config dict this scenario stands for."""
        z, o = self.zero, self.optimizer
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": self.micro_batch,
            "gradient_accumulation_steps": self.grad_accum_steps,
            "gradient_clipping": z.gradient_clipping,
            "steps_per_print": 10**9,
            "zero_optimization": {
                "stage": z.stage,
                "offload_optimizer": {"device": z.offload_optimizer, **z.pinning()},
                "contiguous_gradients": z.contiguous_gradients,
                "overlap_comm": z.overlap_comm,
                "reduce_bucket_size": z.reduce_bucket_size,
                "allgather_bucket_size": z.allgather_bucket_size,
            },
            "optimizer": {"type": o.type, "params": {"lr": o.lr, "betas": list(o.betas), "eps": o.eps,
                                                     "weight_decay": o.weight_decay}},
        }
        zero = config["zero_optimization"]
        if z.offload_param is not None:
            zero["offload_param"] = {"device": z.offload_param, **z.pinning()}
        zero.update({k: getattr(z, k) for k in STAGE3_KNOBS if getattr(z, k) is not None})
        if self.precision == "bf16":
            config["bf16"] = {"enabled": True}
        elif self.precision == "fp16":
            config["fp16"] = {"enabled": True}
        return config


def packaged_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("rssprobe.scenarios").iterdir() if p.name.endswith(".toml"))


def read(ref: str) -> tuple[str, dict[str, Any]]:
    """(label for messages, raw dict) for a path or a packaged scenario name."""
    path = Path(ref)
    if path.suffix == ".py":  # a training script: rssprobe run --script PATH
        return raw_scenario(path)
    if path.suffix == ".toml" or path.exists():
        outputs.note(path)  # an input: nothing this command writes may land over it (store/outputs.py)
        label, text = str(path), read_text(path)
    else:
        res = resources.files("rssprobe.scenarios").joinpath(f"{ref}.toml")
        if not res.is_file():
            hint = did_you_mean(ref, packaged_names())
            raise UserError(f"{ref}: no such file or packaged scenario{hint} (packaged: {', '.join(packaged_names())})")
        label, text = f"{ref} (packaged)", res.read_text()
    try:
        return label, loads_toml(text, label)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{label}: not valid TOML ({e})") from None


def _parse_value(text: str, item: str) -> Any:
    """A --set value is one TOML value (3, 1e6, true, [1, 2], "text") or, failing that, a bare word read as a
    string; never more: a newline, or anything TOML would read as a further key or table, is refused."""
    if "\n" in text or "\r" in text:
        raise UserError(f"--set {item!r}: a value is one line (one TOML value, no newline)")
    try:
        parsed = loads_toml(f"v = {text}", f"--set {item.partition('=')[0].strip()}", "not one TOML value")
    except tomllib.TOMLDecodeError:
        if not BARE_WORD.fullmatch(text):
            raise UserError(f"--set {item!r}: {text!r} is not one TOML value (quote a string: key=\"text\")") from None
        return text
    if list(parsed) != ["v"]:
        raise UserError(f"--set {item!r}: {text!r} is not one TOML value")
    return parsed["v"]


KEY = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")
BARE_WORD = re.compile(r"[A-Za-z0-9_.+\-/:@]*")  # an unquoted string a --set may give (cpu, non_reentrant, a path)


# Keys that replace one another: sizing the model on the command line by parameter count
# overrides a file that sized it by layers, and the other way round.
REPLACES = {"model.params": "model.layers", "model.layers": "model.params"}


def _put(out: dict[str, Any], key: str, value: Any, label: str) -> None:
    """Set the dotted `key` of a raw scenario to `value` (a sizing key clears the one it replaces)."""
    if key in REPLACES:
        table, _, other = REPLACES[key].partition(".")
        if isinstance(out.get(table), dict):
            out[table].pop(other, None)
    parts = key.split(".")
    node = out
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(f"{label}: {key}: {part} is not a table")
        node = child
    node[parts[-1]] = value


def apply_overrides(raw: dict[str, Any], overrides: list[str], label: str) -> dict[str, Any]:
    """The user's own `--set KEY=VALUE` words applied (each value parsed as one TOML value)."""
    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set {item!r}: expected key=value")
        if not KEY.fullmatch(key.strip()):
            raise UserError(f"--set {item!r}: {key.strip()!r} is not a key (names and dots: zero.stage)")
        _put(out, key.strip(), _parse_value(value.strip(), item), label)
    return out


def apply_values(raw: dict[str, Any], values: dict[str, Any], label: str) -> dict[str, Any]:
    """Typed values (config/scenariospec.py: --steps, --world-size, --params, ...) set at their dotted keys as they are:
    never written out as text and parsed again. A script run's `steps` is its script.stop_after."""
    out = copy.deepcopy(raw)
    for key, value in values.items():
        _put(out, "script.stop_after" if key == "steps" and out.get("script") else key, value, label)
    return out


def validate(raw: dict[str, Any], label: str) -> Scenario:
    try:
        scen = Scenario.model_validate(raw)
    except ValidationError as e:
        raise from_validation(label, e.errors()) from None
    if scen.model.kind == "transformers":  # the config is built here, before any worker starts
        hfconfig.resolve(scen.model, label)
    if scen.script is not None:  # every file check, whether a [script] table declares a sha256 or not
        resolved, sha256, _text = check_file(Path(scen.script.path), scen.script.sha256)
        scen.script.path, scen.script.sha256 = str(resolved), sha256
    return scen


def from_raw(raw: dict[str, Any], label: str, overrides: list[str] | None = None,
             values: dict[str, Any] | None = None) -> Scenario:
    """A raw scenario with the user's --set words, then the command's typed values, applied and validated."""
    if raw.get("script"):
        overrides = check_overrides(overrides or [], label)
    return validate(apply_values(apply_overrides(raw, overrides or [], label), values or {}, label), label)


def load(ref: str = "default", overrides: list[str] | None = None, values: dict[str, Any] | None = None) -> Scenario:
    """Scenario `ref` (a .toml path, a packaged name or a .py script) with --set words and typed values applied."""
    label, raw = read(ref)
    return from_raw(raw, label, overrides, values)
