"""This machine's calibration of a target, cached: run by campaign/scale.py into `<cache>/estimate/<scenario>-<key>/
scale` (resumed when unfinished, remeasured with --fresh); `calibration.json` beside it holds the key, so a
directory of another configuration is refused, never reused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ...analysis import sweep
from ...campaign import scale
from ...contract.exitcodes import EXIT_INTERRUPTED
from ...contract.files import FORMAT_KEY, FORMAT_VERSION, format_of, too_new
from ...errors import UserError
from ...log import say
from ...run.group import Start
from ...store import reader
from ...store.writer import now_iso, write_json_atomic
from .plan import Plan, calibration_dir
from .request import Request

CALIBRATION_FILE = "calibration.json"


class Stopped(UserError):
    """The calibration did not finish: interrupted (exit 130) or a run failed (exit 1)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def read_key(path: Path) -> dict[str, Any] | None:
    """The key a cached calibration was made for (None: no calibration file yet)."""
    if not path.is_file():
        return None
    data = reader.read_json_object(path, "calibration file")
    version = format_of(data)
    if version is None or version > FORMAT_VERSION:
        raise UserError(f"{path}: {too_new(version) if version else 'not a calibration file'}")
    return data.get("key") if isinstance(data.get("key"), dict) else None


def calibrate(req: Request, plan: Plan, key: dict[str, Any], patches: list[str]) -> Path:
    """The cached calibration's scale directory, run (or resumed, or with --fresh remeasured) if unfinished."""
    home = calibration_dir(plan.scen, key)
    directory = home / "scale"
    stored = read_key(home / CALIBRATION_FILE)
    if stored is not None and stored != json.loads(json.dumps(key)):
        raise UserError(f"{home}: holds a calibration for another configuration; remove it or pass --fresh")
    finished = stored is not None and not req.fresh and finished_sweep(directory)
    options = dataclasses.replace(req.options, patches=tuple(patches), repeat=plan.repeat)
    start = Start(spec=plan.spec, options=options, argv=req.argv)
    if not finished:
        scale.preflight_sweep(plan.sizes, start)  # every size's per-run preflight, before its directory
        home.mkdir(parents=True, exist_ok=True)
        write_json_atomic(home / CALIBRATION_FILE, {FORMAT_KEY: FORMAT_VERSION, "key": key, "created": now_iso()})
        say(f"calibrating {plan.scen.name} on this machine: {len(plan.sizes)} sizes x {plan.repeat} run(s), "
            f"{plan.steps} steps each, {plan.ranks} rank(s), into {directory}")
        outcome = scale.sweep(plan.sizes, start, directory, req.fresh)
        if outcome.exit_code == EXIT_INTERRUPTED:
            raise Stopped(f"calibration interrupted; rerun to resume it ({directory})", outcome.exit_code)
        if outcome.exit_code:
            raise Stopped(f"calibration failed: {'; '.join(outcome.data['problems'][:2])} ({directory})", 1)
    return directory


def finished_sweep(directory: Path) -> bool:
    """Whether every size of the calibration has its finished runs."""
    try:
        return sweep.ScaleDir.is_scale(directory) and not sweep.Sweep.load(directory).problems
    except UserError:
        return False
