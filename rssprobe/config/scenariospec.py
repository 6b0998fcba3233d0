"""A scenario as a command asked for it: the reference, the user's own --set words, and the typed options.

The command line builds one ScenarioSpec; every runner (run, scale, gate, matrix, plan, bisect, estimate,
prepare) takes it and loads it, so a typed option (`--steps 4`, `--world-size 2`, `--params 7e9`, `--stage 3`,
`--torch-alloc-conf ...`, `--trim-at-end`, a script's arguments) stays a typed value until it is set on the
scenario (scenario.apply_values): it is never written out as a `key=value` string and parsed again. Only what the
user typed as `--set KEY=VALUE` travels as words. `identity()` is what campaign definitions and caches hash;
`argv()` is the one place a command line that reproduces the spec is derived from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from . import scenario

# typed option -> the scenario key it sets (order: the order they are applied, after the user's --set words)
KEYS = {
    "steps": "steps",
    "world_size": "world_size",
    "params": "model.params",
    "stage": "zero.stage",
    "offload_param": "zero.offload_param",
    "torch_alloc_conf": "torch_alloc_conf",
    "trim_at_end": "probes.trim_at_end",
    "script_args": "script.args",
    "script_command": "script.command",
}
# the `rssprobe run` flag each typed option is given with (script args and command travel after `--`)
FLAGS = {"steps": "--steps", "world_size": "--world-size", "torch_alloc_conf": "--torch-alloc-conf"}


@dataclass(frozen=True)
class ScenarioSpec:
    """What a command was asked to run: a scenario reference, --set words, typed options (None: not given)."""

    ref: str
    sets: tuple[str, ...] = ()
    steps: int | None = None
    world_size: int | None = None
    params: float | None = None
    stage: int | None = None
    offload_param: str | None = None
    torch_alloc_conf: str | None = None
    trim_at_end: bool | None = None
    script_args: tuple[str, ...] | None = None
    script_command: tuple[str, ...] | None = None

    def with_(self, **changes: Any) -> ScenarioSpec:
        """This spec with some options replaced (`sets=` adds the words after its own)."""
        if "sets" in changes:
            changes["sets"] = (*self.sets, *changes["sets"])
        return dataclasses.replace(self, **changes)

    def values(self) -> dict[str, Any]:
        """The typed options given, at the scenario keys they set."""
        return {KEYS[name]: value for name, value in self.options().items()}

    def load(self) -> scenario.Scenario:
        return scenario.load(self.ref, list(self.sets), self.values())

    def load_each(self, variants: list[dict[str, Any]],
                  read: tuple[str, dict[str, Any]] | None = None) -> list[scenario.Scenario]:
        """One scenario per variant of the typed options (a sweep's sizes), the scenario's file read once (or not
        at all: `read`, the (label, raw) scenario.read gave the caller for this spec's ref)."""
        label, raw = read or scenario.read(self.ref)
        return [self.with_(**v).apply(raw, label) for v in variants]

    def apply(self, raw: dict[str, Any], label: str) -> scenario.Scenario:
        """The spec's words and values on a raw scenario that is not a file (a known model's, a config.json's)."""
        return scenario.from_raw(raw, label, list(self.sets), self.values())

    def identity(self) -> dict[str, Any]:
        """What makes two specs the same: JSON (a campaign's definition, a cache key)."""
        options = self.options()
        return {"scenario": self.ref, "sets": list(self.sets), **({"options": options} if options else {})}

    def options(self) -> dict[str, Any]:
        """The typed options given, by name (tuples as JSON lists)."""
        return {name: list(v) if isinstance(v, tuple) else v for name in KEYS
                if (v := getattr(self, name)) is not None}

    def argv(self, *options: str) -> list[str]:
        """The `rssprobe run` words (scenario or script, --set, flags, then `options`, then `-- ARGS`) that
        reproduce this spec."""
        words, tail = self.words()
        return [*words, *options, *tail]

    def words(self) -> tuple[list[str], list[str]]:
        """(the scenario's words for `rssprobe run`, the `-- ARGS` that must come last: empty for a scenario)."""
        if self.script_command is not None:  # the user's own launcher: rssprobe run -- LAUNCHER ...
            head, tail = [], ["--", *self.script_command]
        elif self.script_args is not None:
            head, tail = ["--script", self.ref], ["--", *self.script_args]
        else:
            head, tail = [self.ref], []
        words = [*head, *[w for s in self.sets for w in ("--set", s)]]
        words += [w for name, flag in FLAGS.items() if (v := getattr(self, name)) is not None for w in (flag, str(v))]
        # what `rssprobe run` has no flag for is given as the --set it is (a command line for a person to rerun)
        if self.params is not None:
            words += ["--set", f"model.params={self.params!r}"]
        if self.stage is not None:
            words += ["--set", f"zero.stage={self.stage}"]
        if self.offload_param is not None:
            words += ["--set", f'zero.offload_param="{self.offload_param}"']
        if self.trim_at_end:
            words.append("--trim-at-end")
        return words, tail
