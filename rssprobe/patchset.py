"""What a run applies: --baseline, --patched (the scenario's declared set) or --patch NAME."""

from __future__ import annotations

from .errors import UserError
from .scenario import Scenario
from .worker.interventions import REGISTRY, SETS, Refused, expand, parse


def known_names(include_testing: bool = False) -> list[str]:
    return [*SETS, *(n for n, i in REGISTRY.items() if include_testing or not i.testing)]


def resolve(scenario: Scenario, baseline: bool, patched: bool, names: list[str]) -> tuple[str, list[str]]:
    """(label, component specs). --baseline applies nothing; --patched the scenario's set."""
    if baseline and (patched or names):
        raise UserError("--baseline applies nothing; it cannot be combined with --patched or --patch")
    requested = list(names)
    if patched:
        requested = [*scenario.patches.patched, *requested]
    if not requested:
        return "baseline", []
    specs: list[str] = []
    for spec in requested:
        try:
            name, options = parse(spec)
            components = expand([name])
        except (KeyError, ValueError) as e:
            raise UserError(f"--patch {spec}: unknown intervention or bad options ({e}); known: "
                            f"{', '.join(known_names())} (see `rssprobe patches`)") from None
        if options:
            if components != [name]:
                raise UserError(f"--patch {spec}: options apply to one intervention, not to the set {name}")
            unknown = set(options) - set(REGISTRY[name].options)
            if unknown:
                raise UserError(f"--patch {spec}: unknown option(s) {', '.join(sorted(unknown))} for {name}")
            components = [spec]
        for component in components:
            component_name, component_options = parse(component)
            check = REGISTRY[component_name].check
            try:
                if check is not None:
                    check(component_options)  # now, not after a worker has started
            except Refused as e:
                raise UserError(f"--patch {spec}: {e}") from None
        specs += [c for c in components if c not in specs]
    label = "patched" if patched and not names else "+".join(parse(s)[0] for s in specs)
    return label, specs
