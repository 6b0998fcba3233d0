"""What a run applies: --baseline, --patched (the scenario's declared set) or --patch NAME.

Names, options and sets are the contract's (rssprobe.contract.interventions: INTERVENTIONS, SETS): every option is
checked here, before a worker starts, without importing the worker's implementations.
"""

from __future__ import annotations

from ..contract.interventions import INTERVENTIONS, SETS, OptionError, expand, option_values, parse
from ..errors import UserError
from .scenario import Scenario

BASELINE = "baseline"  # the patch "set" that applies nothing


def known_names(include_testing: bool = False) -> list[str]:
    return [*SETS, *(n for n, i in INTERVENTIONS.items() if include_testing or not i.testing)]


def resolve(scenario: Scenario, baseline: bool, patched: bool, names: list[str]) -> tuple[str, list[str]]:
    """(label, component specs). --baseline applies nothing; --patched the scenario's set."""
    if baseline and (patched or names):
        raise UserError("--baseline applies nothing; it cannot be combined with --patched or --patch")
    requested = list(names)
    if patched:
        requested = [*scenario.patches.patched, *requested]
    if not requested:
        return BASELINE, []
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
            components = [spec]
        for component in components:
            try:
                option_values(component)  # now, not after a worker has started
            except OptionError as e:
                raise UserError(f"--patch {spec}: {e}") from None
        specs += [c for c in components if c not in specs]
    label = "patched" if patched and not names else "+".join(parse(s)[0] for s in specs)
    return label, specs
