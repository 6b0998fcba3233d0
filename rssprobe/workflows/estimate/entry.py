"""The run entry of `rssprobe estimate`: check the question and the target (one line, exit 2, before anything
runs), ask the worker's DeepSpeed for its defaults and its own estimate, calibrate or load the calibration, and hand
both to analysis/estimate.py (figures), analysis/provision.py (phases, fit, changes, the answer) and
analysis/dsformula.py (DeepSpeed's formula beside it)."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from ...analysis import calibration as calib
from ...analysis import dsformula, partition, provision, savephase
from ...analysis import estimate as arithmetic
from ...analysis.results import Estimate
from ...analysis.summary import ELEMENT_BYTES
from ...config import scenario, trainerjob
from ...contract.files import FORMAT_KEY, FORMAT_VERSION
from ...contract.interventions import PIN_REGISTER
from ...log import say
from ...run import dsinfo, memlimits
from ...run import request as run_request
from ...run.envs import resolve_python
from . import job as estimate_job
from .calibrate import calibrate
from .checks import check
from .plan import calibration_key
from .request import Request, question
from .target import describe_target, optimizer_kept, target_scenario
from .terms import calibration_notes, rule, terms


def run(req: Request) -> Estimate:
    """Check, calibrate (or load), estimate; the estimate as a dict (analysis/estimate.py's, and what it is)."""
    q = question(req)
    # the SCENARIO file read once: for the target, and for the calibration's sizes when they are of its shape
    read = scenario.read(req.spec.ref) if req.source == "scenario" else None
    scen, shape, origin = target_scenario(req, read)
    on_device = optimizer_kept(req, q.accelerator, scen.zero.offload_param is not None)
    job = trainerjob.resolve(req.zero_init, req.load_dtype, req.trainable, scen.zero.stage, scen.model.kind,
                             shape.params, req.final_save, req.load_onto, q.accelerator)
    ranks = q.ranks
    checked = check(req, q, scen, shape, read)
    plan = checked.plan
    python, _env = resolve_python(req.options.env_ref, req.options.python, log=say)
    # two interventions that replace one another, a misspelt allocator key or a bad value: refused as `run` does
    run_request.check_asked(req.options.patches, req.spec.torch_alloc_conf, python)
    info = dsinfo.ask(python, {"params": shape.params, "largest_layer": shape.largest_layer, "ranks_per_node": ranks,
                               "nodes": req.nodes, "stage": scen.zero.stage,
                               "offload_param": scen.zero.offload_param is not None})
    defaults = info["zero_defaults"]
    zero = partition.zero_of(scen.zero.model_dump(), ELEMENT_BYTES[scen.precision], ranks * req.nodes,
                             q.accelerator, defaults)
    directory = checked.cal_ref or calibrate(req, plan, calibration_key(req, plan, info, python, checked.patches),  # type: ignore[arg-type]
                                             checked.patches)
    cal = calib.load(directory, defaults)
    cal.phases = savephase.load()  # the load and the saves its own runs did not measure (a GPU sweep: neither)
    pin_rule = rule(cal.versions.get("torch"), req.spec.torch_alloc_conf)
    pinning = "register" if PIN_REGISTER in checked.asked else "torch"
    target = arithmetic.Target(shape, zero, ranks, req.nodes, pin_rule, pinning, scen.steps, zero_init=job.zero_init,
                               load_bytes=job.load_bytes, trainable=job.trainable,
                               final_save=job.final_save, optimizer_on_device=on_device,
                               load_onto_device=job.load_onto == "device")
    out = arithmetic.estimate(target, cal)
    trainer = estimate_job.trainer_own(req.seen_steady, out["node"]["steady_rss_bytes"])
    if trainer["bytes"]:
        target = replace(target, trainer_bytes=trainer["bytes"])
        out = arithmetic.estimate(target, cal)
    measured, predicted = terms(cal, pin_rule, req, q, info)
    phase_measured, phase_predicted = savephase.rules(target, cal.phases)  # how each carries to the target
    measured, predicted = {**phase_measured, **measured}, {**phase_predicted, **predicted}
    if on_device:
        predicted["optimizer_on_device"] = ("the optimizer on the device: no host buffers; steady = baseline + fixed "
                                            "cost (the per-parameter host terms fitted on the offloaded calibration "
                                            "left out)")
    notes = list(out.pop("notes"))
    notes += [trainer["note"]] if trainer["note"] else []
    notes.extend(calibration_notes(req, q, plan, cal, out, scen, zero.world, shape.params))
    ram, ram_from = (req.node_ram, "--node-ram") if req.node_ram is not None else \
        memlimits.node_ram() if q.for_this_machine else (None, None)
    rows = savephase.final_rows(provision.phases(out["node"], ram), target)
    sources = savephase.sources(target, cal)
    for r in rows:
        r["from"] = sources.get(r["key"], "")
    prov = provision.provision(rows)
    fixes = provision.changes(target, cal, ram)
    argv = estimate_job.user_argv(req.argv)
    for c in fixes:
        c["command"] = estimate_job.command(argv, c["flags"])
    unit = ("GPU" if q.accelerator == "cuda" else "CPU rank") + ("s" if ranks != 1 else "")
    loaded = [f"loaded in {job.load_dtype}" + (" onto the GPUs" if job.load_onto == "device" else "")] \
        if scen.model.kind == "transformers" else []
    loaded += [f"{job.trainable:.2%} trainable"] if job.trainable < 1 else []
    size = f"{shape.params / 1e9:,.2f} B params" if shape.params >= 1e9 else f"{shape.params / 1e6:,.1f} M params"
    init = "" if zero.stage < 3 else " under zero.Init" if job.zero_init else " without zero.Init"
    what = f"{scen.name} ({', '.join([size, *loaded])}) at ZeRO-{zero.stage}{init} on {ranks} {unit} per node" \
        + (f", with {provision.gib(trainer['bytes'])} GiB of the trainer's own" if trainer["bytes"] else "")
    measure = estimate_job.measure_hint(q.accelerator, rows, bool(cal.provenance.get("packaged")), req.argv)
    for r in rows:
        if not r["measured"] and measure:
            r["why"] = r["why"].replace("(the answer says how to measure it)", f"; {measure}")
    answer = provision.answer(what, out["node"], rows, prov, ram, ram_from, fixes, measure,
                              [c["command"] for c in fixes])
    other = estimate_job.other_way(target, cal, ram, job.load_dtype) if zero.stage == 3 else None
    if other is not None:
        answer.insert(1, other["sentence"])
    assumptions = [*job.assumptions(zero.stage, not on_device, zero.offload_param, scen.model.kind),
                   trainer["assumption"]]
    lock = provision.lock_check(out["rank"]["pinned_requested_bytes"],
                                memlimits.lock_limit() if q.for_this_machine else None)
    rows_ds = [dsformula.formula(shape.params, ranks, req.nodes, zero.stage, zero.offload_param, z)
               for z in ((False, True) if zero.stage == 3 else (False,))]
    formula = next((f for f in rows_ds if f["zero_init"] == (job.zero_init and zero.stage == 3)), rows_ds[0])
    ds_values = {False: info["estimator_cpu_bytes"], True: info.get("estimator_cpu_bytes_zero_init")}
    for f in rows_ds:
        f["deepspeed_bytes"] = ds_values[f["zero_init"]]
        f["matches_target"] = f is formula
    estimator = formula["deepspeed_bytes"]
    return cast(Estimate, {FORMAT_KEY: FORMAT_VERSION,
            "answer": answer, "assumptions": assumptions, "other_way": other,
            "trainer_own": {k: trainer[k] for k in ("seen_steady_bytes", "estimated_steady_bytes", "bytes")},
            "deepspeed_formula_rows": rows_ds,
            "target": describe_target(scen, shape, zero, req, q, origin), **out,
            "phases": rows, "provision": {**prov, "line": provision.provision_line(prov)},
            "node_ram": {"bytes": ram, "from": ram_from}, "changes": fixes, "lock": lock,
            "deepspeed_estimate_bytes": estimator,
            "deepspeed_estimate_rank_bytes": None if estimator is None else estimator / ranks,
            "deepspeed_estimator": info["estimator"],
            "deepspeed_formula": {**formula, "reconciled": dsformula.reconcile(formula, out["node"], req.nodes,
                                                                               zero.stage)},
            "versions": {"estimate_for": {"torch": info["torch"], "deepspeed": info["deepspeed"]},
                         "calibration": cal.versions},
            "measured_terms": measured, "predicted_terms": predicted, "notes": notes,
            "calibration": {"path": str(cal.path), "accelerator": cal.accelerator, "runs": len(cal.points),
                            "repeats": cal.repeats, "steps": cal.steps, "ranks": cal.ranks,
                            "params": sorted(set(cal.params)), "left_out": cal.left_out, "allocator": cal.allocator,
                            "malloc_env": cal.malloc_env, "read_sd_bytes": cal.read_sd,
                            "scenario": cal.scenario.get("name"),
                            "provenance": cal.provenance, "proxy": plan.proxy if plan else None}})
