"""Which code sites a run instruments: the declared default set plus the scenario's extras."""

from __future__ import annotations

import tomllib
from importlib import resources

from .scenario import Scenario


def _groups() -> list[dict]:
    return tomllib.loads(resources.files("rssprobe.data").joinpath("sites.toml").read_text())["group"]


def default_sites(stage: int) -> list[str]:
    """The declared default sites of one ZeRO stage (data/sites.toml: groups of sites, each for its stages)."""
    return [site for g in _groups() if stage in g["stages"] for site in g["sites"]]


def first_step_only(scenario: Scenario) -> list[str]:
    """The run's default sites declared `per_parameter` (called once per parameter tensor): measured on the
    first step only, unless the scenario asks for full probes on every step (probes.steady_sites)."""
    if scenario.probes.sites != "default" or scenario.probes.steady_sites == "full":
        return []
    stages = _stages(scenario)
    return list(dict.fromkeys(site for g in _groups() if stages & set(g["stages"]) and g.get("per_parameter", False)
                              for site in g["sites"]))


def _stages(scenario: Scenario) -> set[int]:
    """The ZeRO stages whose sites a run installs: a script's stage is its own config's, known only once it runs."""
    return {1, 2, 3} if scenario.script is not None else {scenario.zero.stage}


def event_sites() -> dict[str, list[str]]:
    """Per in-run event (checkpoint, eval, reinit), the sites installed when a scenario declares it."""
    data = tomllib.loads(resources.files("rssprobe.data").joinpath("event_sites.toml").read_text())
    return {name: list(paths) for name, paths in data["events"].items()}


def for_scenario(scenario: Scenario) -> list[tuple[str, bool]]:
    """(dotted path, required): default sites may be absent in a version; user-given ones must exist."""
    probes = scenario.probes
    defaults = dict.fromkeys(p for stage in sorted(_stages(scenario)) for p in default_sites(stage))
    out = [(path, False) for path in (defaults if probes.sites == "default" else [])]
    for name, paths in event_sites().items():  # an event's own sites, wherever the site list comes from
        if getattr(scenario, name, None) is not None:
            out += [(path, False) for path in paths if path not in {p for p, _ in out}]
    known = {p for p, _ in out}
    out += [(path, True) for path in [*probes.extra_sites, *probes.trace_sites] if path not in known]
    return out
