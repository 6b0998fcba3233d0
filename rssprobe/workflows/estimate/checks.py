"""Everything the estimate refuses before DeepSpeed is asked anything: an unknown intervention (as `run` refuses
it), a world size the model cannot be partitioned over, a malformed --torch-alloc-conf, calibration options beside
a calibration that is measured already, a calibration measured on another accelerator; and the plan of this
machine's calibration, whose runs are checked (steps against the time-out, the machine) before any starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...analysis import calibration as calib
from ...analysis import partition
from ...analysis.summary import ELEMENT_BYTES
from ...campaign import scale
from ...config import modelshape, patchsets, torch_alloc_conf
from ...config.scenario import Scenario
from ...contract.interventions import PIN_REGISTER, parse
from ...errors import UserError
from .plan import Plan, calibration_plan
from .request import Question, Request
from .terms import rule

CUDA_CALIBRATION = "h200-default"  # rssprobe/data/calibrations/<name>.json: the default for --accelerator cuda


@dataclass
class Checked:
    """What the checks decided: the patches (as asked; those the calibration applies) and where the calibration
    comes from (a measured one, or this machine's plan)."""

    asked: list[str]
    patches: list[str]  # pin.register cannot apply on the CPU
    cal_ref: Path | None
    plan: Plan | None


def check(req: Request, q: Question, scen: Scenario, shape: modelshape.Shape,
          read: tuple[str, dict[str, Any]] | None) -> Checked:
    """The refusals that come before DeepSpeed is asked (UserError, one line); `read`: the SCENARIO file as read."""
    ranks = q.ranks
    asked = list(req.options.patches)
    patchsets.resolve(scen, False, False, asked)  # an unknown intervention is refused as `run` refuses it
    patches = [p for p in asked if parse(p)[0] != PIN_REGISTER]
    why = partition.refusal(shape, partition.zero_of(scen.zero.model_dump(), ELEMENT_BYTES[scen.precision],
                                                     ranks * req.nodes, q.accelerator, {}))
    if why:  # the world size alone decides it: refused before DeepSpeed is even asked
        raise UserError(f"{ranks} ranks per node x {req.nodes} node(s): {why}")
    if req.spec.torch_alloc_conf is not None:
        try:
            torch_alloc_conf.split(req.spec.torch_alloc_conf)
        except ValueError as e:
            raise UserError(f"--torch-alloc-conf {req.spec.torch_alloc_conf}: {e}") from None
    made_here = {"--calibration-steps": req.calibration_steps, "--calibration-ranks": req.calibration_ranks,
                 "--repeat": req.options.repeat, "--calibration-params": req.calibration_params}
    given = [flag for flag, value in made_here.items() if value is not None]
    cal_ref = req.calibration
    if cal_ref is None and q.accelerator == "cuda":
        cal_ref = calib.packaged(CUDA_CALIBRATION)
        if given:
            raise UserError(f"{', '.join(given)}: shape a calibration this machine makes; a CUDA target is estimated "
                            "from one measured on a GPU (the packaged H200 sweep, or --calibration DIR)")
    if req.calibration is not None and given:
        raise UserError(f"{', '.join(given)}: shape a calibration this machine makes; --calibration "
                        f"{req.calibration} is measured already")
    plan = None
    if cal_ref is not None:  # what it was measured on decides before DeepSpeed is asked anything
        accelerator, versions = calib.recorded(cal_ref)
        if accelerator != q.accelerator:
            raise UserError(f"--calibration {cal_ref}: measured on {accelerator}, the target is on {q.accelerator}")
        rule(versions.get("torch"), req.spec.torch_alloc_conf)
    else:  # the calibration's runs are checked (steps against the time-out, the machine) before anything
        plan = calibration_plan(req, scen, ranks)
        scale.size_scenarios(plan.spec, plan.sizes, read if plan.proxy is None else None)
    return Checked(asked, patches, cal_ref, plan)
