"""Interventions: names, typed options, counters and sets, declared here and implemented in the worker.

Part of the contract (rssprobe/contract/__init__.py): stdlib only."""

import math
from dataclasses import dataclass
from typing import Any

# ---- interventions: declared here, implemented in the worker ----------------------------------------------

class OptionError(ValueError):
    """An intervention's options are not what it declares (one line naming the intervention and the option)."""


@dataclass(frozen=True)
class Option:
    """One option of an intervention, given on the command line as text (`--patch NAME:KEY=VALUE,...`)."""

    name: str
    kind: type  # str, int or float: what the text must read as
    help: str
    default: str | None = None  # None: absent unless given
    minimum: float | None = None  # numbers: finite and >= this
    choices: tuple[str, ...] = ()  # str: one of these
    words: tuple[str, ...] = ()  # numbers: words accepted instead (step=every); read as None
    required: str = ""  # when it must be given: its placeholder (site=DOTTED.PATH)
    excludes: str = ""  # an option it cannot be given with
    refusal: str = ""  # the reason given for an excluded or non-positive value

    def describe(self) -> str:
        kind = self.required or {str: "text", int: "integer", float: "number"}[self.kind]
        bounds = " > 0" if self.refusal else f" >= {self.minimum:g}" if self.minimum is not None else ""
        one_of = f" ({'|'.join(self.choices)})" if self.choices else ""
        words = f" or {'|'.join(self.words)}" if self.words else ""
        default = f", default {self.default}" if self.default is not None else ", required" if self.required else ""
        excludes = f", not with {self.excludes}" if self.excludes else ""
        return f"{kind}{bounds}{one_of}{words}{default}{excludes}: {self.help}"


@dataclass(frozen=True)
class Intervention:
    name: str
    description: str
    counter: str  # the effect key that says it took effect (must end > 0)
    options: tuple[Option, ...] = ()
    testing: bool = False  # test-only: hidden from `rssprobe patches` unless asked

    def values(self, given: dict[str, str]) -> dict[str, Any]:
        """The options as typed values (defaults filled in); OptionError naming the first that is wrong."""
        unknown = sorted(set(given) - {o.name for o in self.options})
        if unknown and not self.options:
            raise OptionError(f"{self.name}: takes no options (got {', '.join(unknown)})")
        if unknown:
            raise OptionError(f"unknown option(s) {', '.join(unknown)} for {self.name}")
        out: dict[str, Any] = {}
        for o in self.options:
            text = given.get(o.name, o.default)
            if text is None:
                if o.required:
                    raise OptionError(f"{self.name}: {o.name}={o.required} is required ({o.help})")
                out[o.name] = None
                continue
            if o.excludes and o.name in given and o.excludes in given:
                raise OptionError(f"{self.name}: {o.name} {o.refusal}")
            out[o.name] = self._value(o, text)
        return out

    def _value(self, o: Option, text: str) -> Any:
        if o.kind is str:
            if o.choices and text not in o.choices:
                raise OptionError(f"{self.name}: {o.name} must be {' or '.join(o.choices)}, not {text!r}")
            return text
        if text in o.words:
            return None
        try:
            value = o.kind(text)
        except ValueError:
            what = "an integer" if o.kind is int else "a number"
            raise OptionError(f"{self.name}: {o.name}={text} is not {what}") from None
        if not math.isfinite(value) or (o.minimum is not None and value < o.minimum):
            raise OptionError(f"{self.name}: {o.name}={text} must be a finite number >= {o.minimum:g}")
        if o.refusal and value <= 0:
            raise OptionError(f"{self.name}: {o.name} {o.refusal}")
        return value


FLOAT_SCALE = "pr8132.float-scale"
MALLOC_TRIM = "pr8132.malloc-trim"
PIN_REGISTER = "pin.register"
NATIVE_PIN = "ds.native-pin"
# DeepSpeed's own switches for its native pinned backend (both first in 0.19.6: PRs #8211 and #8283)
DS_PIN_BACKEND_ENV = "DS_PIN_MEMORY_BACKEND"
DS_PIN_REGISTER_ENV = "DS_PIN_MEMORY_REGISTER_DEVICE"
INJECT = "testing.inject"
LITTER = "testing.litter"
HOLD = "testing.hold"
ABORT_AT_EXIT = "testing.abort_at_exit"
KEEP_ENGINE = "testing.keep_engine"

_ZERO = "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer"
_MIB = {"anon": "a touched anonymous mmap", "stack": "a parked thread's touched stack",
        "malloc": "4 KiB mallocs, kept", "file": "a file written, mapped and read"}

INTERVENTIONS: dict[str, Intervention] = {i.name: i for i in [
    Intervention(FLOAT_SCALE, "PR #8132 part 1: combined_scale as a Python float before the in-place unscale "
                 "multiply (CPU offload only)", counter="float_conversions"),
    Intervention(MALLOC_TRIM, "PR #8132 part 2: malloc_trim(0) once per param group / subgroup on its first CPU "
                 "Adam step", counter="trims"),
    Intervention(PIN_REGISTER, "DeepSpeed's pinned buffers allocated pageable (page-aligned) and registered at "
                 "their exact size with cudaHostRegister, unregistered when the storage is freed, instead of torch's "
                 "power-of-two caching host allocator (CUDA only; on the CPU accelerator a no-op, counted "
                 "did_not_apply)", counter="registered"),
    Intervention(NATIVE_PIN, "DeepSpeed's native pinned backend (DS_PIN_MEMORY_BACKEND=native, PR #8211, DeepSpeed "
                 ">= 0.19.6): page-aligned posix_memalign + mlock at each request's exact size, registered with the "
                 "device where register=on (DS_PIN_MEMORY_REGISTER_DEVICE, PR #8283; a no-op on the CPU "
                 "accelerator, counted register_did_not_apply). Needs `ulimit -l` above the pinned bytes (or "
                 "CAP_IPC_LOCK): checked before the run", counter="native_pins", options=(
                     Option("register", str, "register the locked pages with the device (DeepSpeed's default: on)",
                            default="on", choices=("on", "off")),)),
    Intervention(INJECT, "test only: allocate bytes_per_param x params bytes (or a fixed mib MiB, whatever the "
                 "size) touched, inside a site on one step, kept (mode=retained) or freed before it returns "
                 "(mode=transient)", counter="injections", testing=True, options=(
                     Option("site", str, "the function to allocate in", required="DOTTED.PATH"),
                     Option("bytes_per_param", float, "bytes per parameter of the model", default="3", minimum=0),
                     Option("mib", float, "a fixed size in MiB instead of bytes_per_param", minimum=0,
                            excludes="bytes_per_param",
                            refusal="is an absolute size > 0, instead of bytes_per_param, not with it"),
                     Option("step", int, "the step (0 = during init; every = each call, every step)", default="1",
                            minimum=0, words=("every",)),
                     Option("mode", str, "kept or freed before the site returns", default="retained",
                            choices=("retained", "transient")))),
    Intervention(LITTER, "test only: leave MiB of free-but-retained glibc heap before every call of a site",
                 counter="litters", testing=True, options=(
                     Option("site", str, "dotted path of the function", default=f"{_ZERO}._optimizer_step"),
                     Option("mib", int, "MiB left free but retained per call", default="64", minimum=0))),
    Intervention(HOLD, "test only: after a site returns on one step, hold MiB of four kinds: a touched anonymous "
                 "mmap, a parked thread's touched stack, 4 KiB mallocs, a file mapped and read",
                 counter="holds", testing=True, options=(
                     Option("site", str, "dotted path of the function", default=f"{_ZERO}.__init__"),
                     Option("step", int, "the step it holds after (0 = during init)", default="0", minimum=0),
                     *(Option(f"{kind}_mib", int, f"MiB held as {what}", default="0", minimum=0)
                       for kind, what in _MIB.items()))),
    Intervention(ABORT_AT_EXIT, "test only: abort (SIGABRT, 'terminate called without an active exception') when "
                 "the worker exits, after its end event, as DeepSpeed 0.15.4's rank 0 does", counter="armed",
                 testing=True),
    Intervention(KEEP_ENGINE, "test only: keep every engine deepspeed.initialize returns alive for good (a "
                 "re-initialisation then leaks the old engine whole)", counter="kept", testing=True),
]}

# Named sets: a name that expands to several components.
SETS: dict[str, list[str]] = {"pr8132": [FLOAT_SCALE, MALLOC_TRIM]}
SET_TITLES: dict[str, str] = {"pr8132": "PR #8132"}  # what a sentence calls a whole set


def parse(spec: str) -> tuple[str, dict[str, str]]:
    """'name:key=value,key=value' -> (name, options)."""
    name, _, rest = spec.partition(":")
    options: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"option {item!r} of {name!r} is not key=value")
        options[key.strip()] = value.strip()
    return name, options


def expand(names: list[str]) -> list[str]:
    """Patch-set names to component names, order kept, duplicates dropped; KeyError if unknown."""
    out: list[str] = []
    for name in names:
        base = name.split(":", 1)[0]
        for component in SETS.get(base, [name]):
            if component.split(":", 1)[0] not in INTERVENTIONS:
                raise KeyError(component)
            if component not in out:
                out.append(component)
    return out


def option_values(spec: str) -> dict[str, Any]:
    """The typed options of one component spec ('testing.inject:site=...'), as its worker reads them."""
    name, given = parse(spec)
    return INTERVENTIONS[name].values(given)
