"""rssprobe estimate (issue 24): each rank's ZeRO partition computed from exact shapes, and host RAM per rank and
per node estimated from a calibration, against what real runs measured.

Truth here is recorded real runs (no training): the CPU runs of reports/cuda-pinned/runs.tar.gz (the default
scenario at 1, 2 and 8 ranks, ZeRO-3 with both offloads; DeepSpeed 0.19.8, their `partition` events, census
and pin requests) and the H200 size sweep of reports/gpu-check-h200/runs.tar.gz (CUDA: host and device roles
apart, RSS on a GPU machine; packed, it ships as the default CUDA calibration); and two real tiny runs the session
shares (tiny_baseline, tiny_two_ranks) against one tiny calibration (tiny_calibration: 3 sizes, 12 steps each),
all with glibc's mmap threshold fixed (the tests that use them start workers: marked). Parsing, refusals, the
interval's floor, the shipped models and the packed calibration start none.
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rssprobe.analysis import calibration, estimate, partition, provision, readnoise, stats
from rssprobe.analysis.calibration import Calibration
from rssprobe.analysis.partition import Zero
from rssprobe.analysis.pinrule import Rule
from rssprobe.analysis.summary import Summary
from rssprobe.cli import main
from rssprobe.config import knownmodels, modelshape, scenario, sizes
from rssprobe.config.runoptions import RunOptions
from rssprobe.config.scenariospec import ScenarioSpec
from rssprobe.errors import UserError
from rssprobe.store.rundir import RunDir
from rssprobe.workflows.estimate import plan as estimate_plan
from rssprobe.workflows.estimate import request as estimate_request
from rssprobe.workflows.estimate import target as estimate_target
from rssprobe.workflows.estimate import terms as estimate_terms

from . import noise
from .conftest import STEADY_GLIBC, rssprobe, summary

REPORTS = Path(__file__).parents[1] / "reports"
MIB = 2**20
# The tolerance for an estimate against a measured run. The runs here fix glibc's mmap threshold: identical
# runs then agree within 0.02 B/param (README, "Noise"; 0.1 MiB at tiny's 4.2 M params, 0.02% of its ~470 MiB),
# so 3% is the bound, not the noise's: these are the "within 3%" rows, not the noise rows.
WITHIN = 0.03
# how much identical runs' pre-model baselines differ (0.16 MiB: the widest of the default scenario's 1- and 2-rank
# calibrations in reports/estimate/heldout-misses.tar.gz, 3 runs a size, 3 sizes)
BASELINE_SPREAD = int(0.16 * MIB)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("recorded")
    for name, archive in (("pinned", REPORTS / "cuda-pinned" / "runs.tar.gz"),
                          ("h200", REPORTS / "gpu-check-h200" / "runs.tar.gz")):
        with tarfile.open(archive) as tar:
            tar.extractall(root / name, filter="data")
    return root


def _point(run: Path) -> calibration.Point:
    got = calibration.point(Summary(RunDir(run)), {})
    assert not isinstance(got, str), got
    return got


RECORDED_RUNS = ["pinned/release-ws1/torch2.13.0-ds0.19.8-baseline-glibc/run-01",
                 "pinned/release-ws2/torch2.13.0-ds0.19.8-baseline-glibc/run-01",
                 "pinned/release-ws8/torch2.13.0-ds0.19.8-baseline-glibc/run-01",
                 "pinned/zero3-default", "pinned/fix-baseline",
                 *(f"h200/runs0/scale-default/params-{n}/run-01" for n in (8392704, 33570816, 134283264))]


@pytest.mark.parametrize("run", RECORDED_RUNS)
def test_each_ranks_partition_is_deepspeeds(recorded: Path, run: str) -> None:
    """The partition DeepSpeed recorded, every census role's bytes after initialize and at the end (host only on
    the H200: its bit16 model and one temp gradient buffer are on the device) and the pin requests in order and
    size are what analysis/partition.py computes from the model's shapes."""
    p = _point(recorded / run)
    assert p.partition == partition.partition_params(p.shape, p.zero)
    for at, census in (("init", "after_init"), ("step", "end")):
        computed = estimate.live(p.shape, p.zero, at)
        found = {role: b for role, b in p.roles[census].items() if role != "other" and b}
        # ZeRO-3's reduce bucket is resident where backward touched it, plus at most the one page the copy ends in
        assert {r: b for r, b in found.items() if r != "buckets"} == \
            {r: b for r, b in computed.items() if r != "buckets" and b}, census
        assert 0 <= found.get("buckets", 0) - computed.get("buckets", 0) <= 4096, census
    assert estimate.checks([p]) == []


def test_deepspeeds_padding_by_hand() -> None:
    """Known answers worked by hand from DeepSpeed's formulas: stage 1/2 pad a group to 2 x world elements;
    stage 3 pads each parameter to a multiple of world; sub-groups close once they reach sub_group_size."""
    seven = modelshape.Shape(((4, 3),), 4, 1)
    assert partition.group_partitions(seven, Zero(2, 2, 2)) == [4]  # 7 -> 8 (x4), 4 a rank
    assert partition.group_partitions(seven, Zero(2, 3, 2)) == [4]  # 7 -> 12 (x6), 4 a rank
    assert partition.refusal(seven, Zero(2, 4, 2)) is None  # 8 (x8), 2 a rank: the last holds element 6
    assert "padding only" in (partition.refusal(seven, Zero(2, 5, 2)) or "")  # 10 (x10): rank 4 holds none
    ten = modelshape.Shape(((10, 10, 1),), 10, 1)
    z3 = Zero(3, 4, 2, sub_group_size=5, persistence_threshold=1)
    assert partition.param_partitions(ten, z3) == [[3, 3, 1]]
    assert partition.sub_groups(ten, z3) == [[3, 3], [1]]
    assert partition.persistent(ten, z3) == [[False, False, True]]
    assert partition.partition_params(ten, z3) == 7


@pytest.fixture(scope="module")
def h200(recorded: Path) -> Calibration:
    return calibration.load(recorded / "h200" / "runs0" / "scale-default", {})


def _target(cal: Calibration, layers: int, ranks: int = 1, via: str = "torch", rule: Rule | None = None,
            width: int = 2048) -> estimate.Target:
    zero = Zero(2, ranks, 2, accelerator=cal.accelerator)
    return estimate.Target(modelshape.linear(layers, width, 1), zero, ranks, 1, rule or cal.points[0].rule, via)


def test_cuda_estimate_reproduces_the_h200_sweep(h200: Calibration) -> None:
    """The issue's known answer: at the H200 sweep's sizes the CUDA estimate's slope is 28.3 +- 1 B/param and its
    fixed part within 10% of the sweep's 1054 MiB (reports/gpu-check.md: 28.34 +- 0.68, 1054 +- 52). Of that
    slope, 18.00 are the host buffers computed from the shapes and 9.99 the pinned slack the rule predicts."""
    layers = [2, 8, 32]  # 8.4, 33.6 and 134.3 M params: the H200 sweep's
    got = [estimate.estimate(_target(h200, n), h200) for n in layers]
    params = [g["rank"]["partition_params"] for g in got]
    above = [g["rank"]["steady_rss_bytes"] - g["rank"]["baseline_bytes"] for g in got]
    fit = stats.linear_fit(params, above)
    assert abs(fit.slope - 28.34) <= 1.0
    assert abs(fit.intercept / MIB - 1054.31) <= 0.10 * 1054.31
    slack = [g["rank"]["pinned_slack_bytes"] / p for g, p in zip(got, params, strict=True)]
    assert all(abs(s - 9.99) < 0.01 for s in slack), slack
    # fp32 master, gradient and Adam's two states 4 each, bf16 staging 2: 18 B a partition element; the host's
    # temp gradient buffer is the largest tensor (2048 x 2048) in bf16; the bit16 model is on the device
    assert [g["rank"]["live_bytes"] for g in got] == [18 * p + 2 * 2048 * 2048 for p in params]


def test_cuda_estimate_predicts_a_run_it_was_not_calibrated_on(h200: Calibration) -> None:
    """Calibrated on the two smaller H200 runs only, the estimate for the 134 M one (4x the largest) is within 3%
    of its measured steady RSS and peak (2 runs leave no degrees of freedom: no interval, said so)."""
    small = Calibration(h200.path, [p for p in h200.points if p.params < 10**8], "cuda", h200.versions,
                        h200.scenario, h200.allocator, h200.malloc_env)
    truth = next(p for p in h200.points if p.params > 10**8)
    got = estimate.estimate(_target(small, 32), small)
    assert abs(got["rank"]["steady_rss_bytes"] / truth.steady - 1) <= WITHIN
    assert abs(got["rank"]["peak_rss_bytes"] / max(truth.step_peak, truth.init_peak) - 1) <= WITHIN
    assert got["rank"]["steady_rss_bytes_low"] is None and any("no interval" in n for n in got["notes"])


def test_the_fixes_remove_the_pinned_slack_and_nothing_else(h200: Calibration) -> None:
    """pin.register pins every request at its own pages, torch 2.13's pinned_max_round_threshold_mb:1 stops the
    rounding: either takes the whole predicted slack off the estimate, every other term unchanged."""
    base = estimate.estimate(_target(h200, 32), h200)
    fixes = [estimate.estimate(_target(h200, 32, via="register"), h200),
             estimate.estimate(_target(h200, 32, rule=Rule.of("2.13.0", "pinned_max_round_threshold_mb:1")), h200)]
    assert base["rank"]["pinned_slack_bytes"] > 9 * 134_283_264
    for fixed in fixes:
        assert fixed["rank"]["pinned_slack_bytes"] < 4096 * 8  # page rounding of 4 requests at most
        saved = base["rank"]["steady_rss_bytes"] - fixed["rank"]["steady_rss_bytes"]
        assert saved == base["rank"]["pinned_slack_bytes"] - fixed["rank"]["pinned_slack_bytes"]
        assert fixed["rank"]["roles"] == base["rank"]["roles"]


def test_far_beyond_the_calibration_no_interval_is_wider_than_its_figure_nor_below_its_floor(
        h200: Calibration) -> None:
    """1,000x past the largest calibrated size (and at 2x): every interval printed is narrower than its figure,
    none reaches below the exact floor (live buffers, slack and the lowest baseline: never negative), and the
    estimate says how far it is (the command says how to calibrate nearer)."""
    for layers in (64, 32_000):  # 268 M params: 2x; 134 G params: 1,000x
        got = estimate.estimate(_target(h200, layers, ranks=8), h200)
        assert got["far"] is (layers > 64)
        for view in (got["rank"], got["node"]):
            for key in estimate.FIELDS.values():
                value, low, high = (view.get(f"{key}_bytes{s}") for s in ("", "_low", "_high"))
                if value is None or low is None:
                    continue
                assert high - low <= value and 0 <= view[f"{key}_bytes_floor"] <= low <= value <= high, key


def test_the_interval_never_reaches_below_the_live_buffers_and_the_baseline(h200: Calibration) -> None:
    """Known answers for the floor. A fitted term whose line's lower bound would fall below the floor is given the
    floor as its lower bound (and, were the line itself below it, as its figure); every figure's floor is what is
    exact: the live buffers, the pinned slack and the calibration's lowest pre-model baseline, per rank, and k
    times that for a node of k ranks; no bound is negative."""
    x = [1e6, 2e6, 3e6] * 3
    y = [100e6 + 8 * n + (5e6 if i % 3 == 0 else -5e6) * n / 1e6 for i, n in enumerate(x)]
    fit = stats.proportional_fit(x, y)
    line = stats.predict_sum(fit, 4e6)
    assert line.low is not None and line.high is not None
    floor = (line.low + line.value) / 2
    clamped = estimate.fitted(fit, 4e6, 1, floor)
    assert (clamped.value, clamped.low, clamped.high, clamped.floor) == (line.value, floor, line.high, floor)
    above = estimate.fitted(fit, 4e6, 1, line.high + 1)  # a line below what is exact: the floor is the figure
    assert above.value == above.low == above.high == above.floor == line.high + 1
    target = _target(h200, 32, ranks=2)
    got = estimate.estimate(target, h200)
    live = sum(estimate.live(target.shape, target.zero, "step").values())
    slack = estimate.pinned(target.shape, target.zero, target.rule, target.via)["slack"]
    exact = live + slack + min(p.baseline for p in h200.points)
    assert got["rank"]["steady_rss_bytes_floor"] == exact and got["node"]["steady_rss_bytes_floor"] == 2 * exact
    assert got["rank"]["steady_rss_bytes_low"] >= exact
    assert all(v >= 0 for view in (got["rank"], got["node"]) for k, v in view.items()
               if k.endswith(("_low", "_high", "_floor")) and v is not None)



def test_a_calibration_that_loads_its_checkpoint_estimates_the_load_peak(h200: Calibration, tmp_path: Path) -> None:
    """Known answer for the checkpoint load (issue 31): calibration runs whose load peaks lie on a known line
    (baseline + 6 B/param + 50 MiB) estimate a 4x larger target's load peak on that line, and a node of 8 ranks at
    8 times it (all ranks at their load peak at once: the worst case); it is a phase of its own, provisioned for
    when it is the highest, and survives packing. Loaded, the model copy's floor is the baseline alone (a loaded
    model's tensors may stay in the mapped checkpoint). A calibration of which one run loaded nothing estimates no
    load and says how to make it do so."""
    def line(n: int) -> int:
        return min(q.baseline for q in h200.points) + 6 * n + 50 * MIB

    loaded = Calibration(**{**vars(h200), "points": [dataclasses.replace(q, load_peak=line(q.params))
                                                     for q in h200.points]})
    target = _target(loaded, 128, ranks=8)  # 537 M params: 4x the largest calibrated
    got = estimate.estimate(target, loaded)
    assert got["rank"]["checkpoint_load_bytes"] == pytest.approx(line(target.shape.params), rel=1e-9)
    assert got["node"]["checkpoint_load_bytes"] == pytest.approx(8 * line(target.shape.params), rel=1e-9)
    assert got["fits"]["checkpoint_load"]["slope_bytes_per_param"] == pytest.approx(6.0, rel=1e-9)
    assert got["rank"]["initialize_model_copy_bytes_floor"] == min(q.baseline for q in h200.points)
    assert got["rank"]["checkpoint_load_bytes_floor"] == min(q.baseline for q in h200.points)
    rows = {r["key"]: r for r in provision.phases(got["node"], None)}
    assert rows["checkpoint_load"]["measured"] and rows["checkpoint_load"]["bytes"] == got["node"][
        "checkpoint_load_bytes"]
    # a load of 60 B/param outgrows every other phase: it is then the peak and what to provision for
    heavy = Calibration(**{**vars(h200), "points": [dataclasses.replace(q, load_peak=q.baseline + 60 * q.params)
                                                    for q in h200.points]})
    got = estimate.estimate(target, heavy)
    assert got["node"]["peak_rss_bytes"] == got["node"]["checkpoint_load_bytes"]
    assert provision.provision(provision.phases(got["node"], None))["phase"] == "checkpoint load"
    packed = calibration.unpack(json.loads(calibration.dumps(calibration.pack(loaded, {}))), tmp_path / "x.json")
    assert [q.load_peak for q in packed.points] == [q.load_peak for q in loaded.points]
    partly = Calibration(**{**vars(loaded), "points": [*loaded.points[:-1], h200.points[-1]]})
    got = estimate.estimate(target, partly)
    assert "checkpoint_load_bytes" not in got["node"]
    [row] = [r for r in provision.phases(got["node"], None) if r["key"] == "checkpoint_load"]
    assert not row["measured"] and "loads no checkpoint" in row["why"]  # the command: workflows (issue 41)

def test_a_calibration_knows_how_far_one_rss_read_of_its_machine_can_be_off(recorded: Path, tmp_path: Path) -> None:
    """The read's spread no interval is finer than (analysis/readnoise): from the host facts a run records
    (its usable CPUs, online CPUs and page: usable x max(32, 2 x online) pages, over sqrt(3)); the recorded H200
    runs predate usable_cpus and page_bytes, so their 16 CPUs and 4 KiB pages (the larger bound); none where the
    CPUs are not named. The packaged calibration carries its sweep's, and packing keeps it."""
    assert readnoise.of_host({"cpu_count": 16, "usable_cpus": 2, "page_bytes": 4096}) == \
        2 * 32 * 4096 / 3 ** 0.5
    assert readnoise.of_host({"cpu_count": 64, "usable_cpus": 4, "page_bytes": 16384}) == \
        4 * 128 * 16384 / 3 ** 0.5
    assert readnoise.of_host({"cpu_count": 16}) == 16 * 32 * 4096 / 3 ** 0.5
    assert readnoise.of_host({"cpu_count": 16, "usable_cpus": 99}) == 16 * 32 * 4096 / 3 ** 0.5  # not above all
    assert readnoise.of_host({}) == readnoise.of_host({"cpu_count": "16"}) == 0.0
    sweep = calibration.load(recorded / "h200" / "runs0" / "scale-default", {})
    assert sweep.read_sd == 16 * 32 * 4096 / 3 ** 0.5
    assert calibration.load(calibration.packaged("h200-default"), {}).read_sd == sweep.read_sd
    again = calibration.unpack(json.loads(calibration.dumps(calibration.pack(sweep, {}))), tmp_path / "x.json")
    assert again.read_sd == sweep.read_sd


def test_a_target_of_fewer_steps_is_estimated_from_the_calibrations_first_steps(h200: Calibration) -> None:
    """The steps are an input: a 2-step target's steady RSS is step 2's of the calibration's runs, a 6-step one's
    the mean of steps 2..6 (the H200 runs made 6; more are estimated from those, with a note)."""
    two, six, twelve = (estimate.estimate(dataclasses.replace(_target(h200, 8), steps=n), h200) for n in (2, 6, 12))
    assert two["steps"] == 2 and six["steps"] == 6 and twelve["steps"] == 6
    fit = estimate.fits(h200.points, 2)["steady"]
    assert estimate.residuals(h200.points, 2)["steady"][0] == h200.points[0].rss_steps[1] - estimate._explained(
        h200.points[0], "step")
    assert fit.n == len(h200.points)
    assert any("the target makes 12 steps" in n for n in twelve["notes"])
    assert not any("steps" in n for n in six["notes"])


def test_deepspeeds_formula_filled_in_is_its_estimator() -> None:
    """dsformula writes DeepSpeed's formula with the numbers in; its figure is what DeepSpeed 0.19.8's functions
    return for the same arguments (read from their source: ZeRO-2 counts the GPUs of all nodes, ZeRO-3 one
    node's and shares the states among the nodes)."""
    from rssprobe.analysis import dsformula

    p = 6_738_415_616
    z2 = dsformula.formula(p, 8, 4, 2, False)
    assert z2["bytes"] == p * max(4 * 32, 16) * 1.5 and "4 x 32 GPUs of all 4 nodes" in z2["formula"]
    z3 = dsformula.formula(p, 8, 4, 3, True)
    assert z3["bytes"] == p * max(4 * 8, 18 / 4) * 1.5 and "18 / 4 nodes" in z3["formula"]
    assert dsformula.formula(p, 1, 1, 2, False)["deciding"] == "model states"


# ---- the question as users ask it: sizes, models, refusals (nothing runs) ------------------------------------

@pytest.mark.parametrize(("text", "count"), [("7B", 7e9), ("70e9", 70e9), ("1.3B", 1.3e9), ("350M", 350e6),
                                             ("125000000", 125e6), ("1_000K", 1e6), (" 7 b ", 7e9), ("2T", 2e12)])
def test_a_parameter_count_as_people_write_it(text: str, count: float) -> None:
    assert sizes.count(text) == pytest.approx(count, rel=1e-12)


@pytest.mark.parametrize(("text", "nbytes"), [("512G", 512 * 2**30), ("512GiB", 512 * 2**30), ("2TB", 2 * 10**12),
                                              ("1.5T", int(1.5 * 2**40)), ("1024", 1024), ("744GB", 744 * 10**9)])
def test_an_amount_of_memory_as_people_write_it(text: str, nbytes: int) -> None:
    assert sizes.nbytes(text) == nbytes


@pytest.mark.parametrize("text", ["nan", "inf", "-5", "0", "1.2.3", "7X", "", "B", "e9", "7 B B"])
def test_a_size_that_is_not_one_is_refused_with_the_reason(text: str) -> None:
    for parse in (sizes.count, sizes.nbytes):
        with pytest.raises(ValueError, match=r"is not|unknown unit"):
            parse(text)


@pytest.mark.parametrize("text", ["1e30", "2PiB", str(2**50 + 1)])
def test_an_absurd_amount_of_memory_is_refused(text: str) -> None:
    """--node-ram and --seen-steady: past 1 PiB is a typo, not a node (1e30 was taken, and printed as the trainer's
    own 931 billion billion GiB); 1 PiB itself is still an amount."""
    with pytest.raises(ValueError, match="more than 1 PiB"):
        sizes.nbytes(text)
    assert sizes.nbytes(str(2**50)) == 2**50


def test_the_shipped_models_are_their_published_shapes() -> None:
    """Every model file builds (on the meta device) exactly the parameter count it declares (the model card's
    total: Llama 2 7B 6,738,415,616 ...); names, Hugging Face ids and any case find it; an unknown name is one
    line with the close ones."""
    for name in knownmodels.names():
        known = knownmodels.load(name)
        scen = scenario.validate(knownmodels.raw_scenario(name, known.hf, "test"), name)
        assert scen.model.n_params == known.params, name  # resolved from its 1- and 2-layer meta models
        assert known.source.startswith("https://huggingface.co/") and known.source.endswith("/config.json")
    assert knownmodels.load("META-LLAMA/Llama-2-7b-hf").name == "llama-2-7b"
    assert knownmodels.load("Llama-3-70B").params == 70_553_706_496
    with pytest.raises(UserError, match="close: llama-3-70b"):
        knownmodels.load("llama-3-7b")


def test_a_scripts_recorded_tensors_are_its_shape_and_damaged_ones_are_named() -> None:
    """A script's run records its model's tensors per param group (its model event's shape_groups): that is the
    calibration point's shape, in order; a damaged record (empty, zero, not a number, a bool, no largest layer) is
    one line naming the run, and a script run without one cannot say its shape."""
    got = modelshape.recorded({"kind": "script"}, None, "run-01", [[4, 2], [3]], 4)
    assert got == modelshape.Shape(((4, 2), (3,)), 4, 0) and got.params == 9
    for groups, largest in (([], 4), ([[]], 4), ([[0]], 4), ([["4"]], 4), ([[True]], 4), ("4", 4), ([[4]], None),
                            ([[4]], -1)):
        with pytest.raises(UserError, match="run-01: its model event's shape_groups"):
            modelshape.recorded({"kind": "script"}, None, "run-01", groups, largest)
    with pytest.raises(UserError, match="run-01: its model's shape is not recorded"):
        modelshape.recorded({"kind": "script"}, None, "run-01")


def test_a_hugging_face_config_json_is_its_model(tmp_path: Path) -> None:
    """--hf-config: a config.json as published (with keys that are no shapes: architectures, torch_dtype,
    transformers_version) builds the same model as the shipped name; a key its config class does not take is left
    out and named."""
    known = knownmodels.load("llama-2-7b")
    path = tmp_path / "Llama-2-7b-hf" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**known.hf, "architectures": ["LlamaForCausalLM"], "torch_dtype": "float16",
                                "transformers_version": "4.31.0.dev0"}))
    req = estimate_request.Request(ScenarioSpec(str(path)), "hf-config")
    scen, shape, origin = estimate_target.target_scenario(req)
    assert shape.params == known.params and scen.name == "Llama-2-7b-hf"
    assert "left out: architectures, torch_dtype" in origin


def _cli(args: list[str], root: Path) -> Any:
    """The real command line, in this process (click's runner): its exit code and its own stderr."""
    return CliRunner().invoke(main, args, env={"RSSPROBE_ESTIMATE": str(root)})


@pytest.mark.parametrize(("args", "says"), [
    (["tiny", "--ranks-per-node", "8"], "--gpus-per-node 8 (CUDA"),  # a rank count alone: where do buffers live?
    (["tiny", "--gpus-per-node", "8", "--accelerator", "cpu"], "GPUs are CUDA"),
    (["tiny", "--gpus-per-node", "8", "--ranks-per-node", "8"], "both given"),
    (["tiny"], "how many ranks a node?"),
    (["--gpus-per-node", "8"], "which model?"),
    (["tiny", "--model", "llama-2-7b", "--gpus-per-node", "8"], "SCENARIO and --model: give one model"),
    (["--model", "llama-9", "--gpus-per-node", "8"], "not a model rssprobe ships"),
    (["tiny", "--params", "7X", "--ranks-per-node", "1", "--accelerator", "cpu"], "unknown unit 'X'"),
    (["tiny", "--params", "nan", "--ranks-per-node", "1", "--accelerator", "cpu"], "not a parameter count"),
    (["tiny", "--params", "-5", "--ranks-per-node", "1", "--accelerator", "cpu"], "> 0"),
    (["tiny", "--params", "100", "--ranks-per-node", "1", "--accelerator", "cpu"], "less than one layer"),
    (["tiny", "--node-ram", "lots", "--ranks-per-node", "1", "--accelerator", "cpu"], "not an amount of memory"),
    (["tiny", "--ranks-per-node", "0", "--accelerator", "cpu"], "0"),
    (["tiny", "--ranks-per-node", "1", "--accelerator", "tpu"], "tpu"),
    (["tiny", "--ranks-per-node", "3000000", "--accelerator", "cpu"], "padding only"),
    (["tiny", "--stage", "2", "--offload-param", "--ranks-per-node", "1", "--accelerator", "cpu"],
     "ZeRO stage 3 only"),
    (["tiny", "--stage", "4", "--ranks-per-node", "1", "--accelerator", "cpu"], "4"),
    (["tiny", "--ranks-per-node", "1", "--accelerator", "cpu", "--calibration", "/nonexistent/dir"],
     "not a scale directory"),
    (["tiny", "--ranks-per-node", "1", "--accelerator", "cpu", "--torch-alloc-conf", "no_colon"], "KEY:VALUE"),
    (["tiny", "--ranks-per-node", "1", "--accelerator", "cpu", "--calibration-steps", "1"], "1 is not in the range"),
    (["tiny", "--ranks-per-node", "1", "--accelerator", "cpu", "--calibration", "/nonexistent/dir",
      "--calibration-steps", "12"], "is measured already"),
    (["tiny", "--gpus-per-node", "8", "--calibration-params", "1e8,2e8,4e8"], "measured on a GPU"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str, tmp_path: Path) -> None:
    proc = _cli(["estimate", *args], tmp_path / "root")
    assert proc.exit_code == 2, proc.output
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert proc.exception is None or isinstance(proc.exception, SystemExit)  # no traceback
    assert not (tmp_path / "root").exists()  # nothing calibrated


def test_calibration_steps_are_in_the_cache_key_and_in_its_runs() -> None:
    """A calibration makes 12 steps (a target of fewer is estimated from its first ones), 3 runs a size under
    glibc's own threshold and 1 with it fixed, one rank (two for ZeRO-3 over several); each choice is in the key
    (--calibration-steps 2 is a calibration of its own, never the cached 12-step one reused)."""
    scen = scenario.load("tiny")
    info: Any = {"torch": "2.13.0", "deepspeed": "0.19.8"}

    def plan(**kw: Any) -> estimate_plan.Plan:
        return estimate_plan.calibration_plan(estimate_request.Request(ScenarioSpec("tiny"), **kw), scen, 1)

    own, fixed = plan(), plan(options=RunOptions(malloc_env={"MALLOC_MMAP_THRESHOLD_": "65536"}, repeat=None))
    assert (own.steps, own.repeat, own.ranks, fixed.repeat) == (12, 3, 1, 1) and own.spec.steps == 12
    z3 = estimate_plan.calibration_plan(estimate_request.Request(ScenarioSpec("llama-small-zero3")),
                                            scenario.load("llama-small-zero3"), 4)
    assert z3.ranks == 2 and z3.spec.world_size == 2 and z3.spec.load().world_size == 2
    keys = [estimate_plan.calibration_key(estimate_request.Request(ScenarioSpec("tiny")), p, info, "python3", [])
            for p in (own, plan(calibration_steps=2))]
    assert keys[0]["steps"] == 12 and keys[1]["steps"] == 2
    assert estimate_plan.calibration_dir(scen, keys[0]) != estimate_plan.calibration_dir(scen, keys[1])


def test_a_model_too_large_to_calibrate_here_is_calibrated_on_its_proxy() -> None:
    """One layer of Llama 2 7B (464 M params with its embedding and head) is above what a calibration runs here:
    the calibration is the packaged llama-small's, at the target's stage, and the output says so."""
    # --stage 3 as the command gives it: the parameters offloaded unless --no-offload-param
    req = estimate_request.Request(ScenarioSpec("llama-2-7b", **estimate_request.zero_options(3, None)), "model")
    scen, _shape, _origin = estimate_target.target_scenario(req)
    got = estimate_plan.calibration_plan(req, scen, 8)
    assert (got.spec.ref, got.proxy, got.scen.zero.stage, got.ranks) == ("llama-small", "llama-small", 3, 2)
    assert got.scen.zero.offload_param is not None  # --stage 3 offloads the parameters unless told not to


def test_several_ranks_from_a_one_rank_calibration_say_how_to_calibrate_them(h200: Calibration) -> None:
    """The H200 sweep is one rank, glibc's own threshold: a target of 2 ranks gets the note (ZeRO-3 names its
    gathers too; on this machine: the options that calibrate at 2 ranks and the target's steps; on a GPU: a 2-rank
    sweep); one rank, or a calibration with the threshold fixed, do not."""
    [note] = estimate_terms.ranks_note(3, 2, 12, h200)
    assert "a 2-rank sweep on a GPU" in note and "gathers" in note
    [note] = estimate_terms.ranks_note(3, 2, 12, Calibration(**{**vars(h200), "accelerator": "cpu"}))
    assert "--calibration-ranks 2 --calibration-steps 12" in note
    [note] = estimate_terms.ranks_note(2, 2, 12, h200)
    assert "each process's own costs among several" in note and "gathers" not in note
    assert estimate_terms.ranks_note(3, 1, 12, h200) == []
    fixed = Calibration(**{**vars(h200), "malloc_env": {"MALLOC_MMAP_THRESHOLD_": "65536"}})
    assert estimate_terms.ranks_note(3, 2, 12, fixed) == []


def test_a_target_a_few_times_beyond_its_calibration_says_it_may_be_low(h200: Calibration) -> None:
    """Under glibc's own threshold (the H200 sweep) a target more than NEAR times the largest calibrated size gets
    the note (held out: 4x beyond, 7% low); at NEAR or below, or with the threshold fixed, none."""
    note = estimate_terms.beyond_note(4.0, h200)
    assert note is not None and note.startswith("the target is 4.0x the largest calibrated size") and "7% low" in note
    assert estimate_terms.beyond_note(estimate.NEAR, h200) is None
    fixed = Calibration(**{**vars(h200), "malloc_env": {"MALLOC_MMAP_THRESHOLD_": "65536"}})
    assert estimate_terms.beyond_note(4.0, fixed) is None


def test_a_damaged_calibration_or_a_knob_its_torch_lacks_is_one_line(recorded: Path, tmp_path: Path) -> None:
    """A scale directory whose index is not JSON; a packed calibration that is not one, or lost a field; a CUDA
    calibration given for a CPU target; torch 2.11 (the H200's) asked for a key first in 2.13: each refused
    before DeepSpeed is asked anything."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "scale.json").write_bytes(b"\xff\xfe not json")
    packed = json.loads(calibration.packaged("h200-default").read_text())
    del packed["points"][0]["baseline"]
    (tmp_path / "lost.json").write_text(json.dumps(packed))
    packed = json.loads(calibration.packaged("h200-default").read_text())
    (tmp_path / "spread.json").write_text(json.dumps({**packed, "read_sd": -1}))
    (tmp_path / "other.json").write_text('{"kind": "something else"}')
    h200 = str(recorded / "h200" / "runs0" / "scale-default")
    cpu = ["--ranks-per-node", "8", "--accelerator", "cpu"]
    for args, says in (([*cpu, "--calibration", str(bad)], "scale.json"),
                       ([*cpu, "--calibration", h200], "measured on cuda"),
                       (["--gpus-per-node", "8", "--calibration", str(tmp_path / "lost.json")], "damaged packed"),
                       (["--gpus-per-node", "8", "--calibration", str(tmp_path / "other.json")], "not a packed"),
                       (["--gpus-per-node", "8", "--calibration", str(tmp_path / "spread.json")], "read_sd -1"),
                       (["--gpus-per-node", "8", "--calibration", h200, "--torch-alloc-conf",
                         "pinned_max_round_threshold_mb:1"], "first in torch 2.13")):
        proc = _cli(["estimate", "default", *args], tmp_path / "root")
        lines = proc.stderr.strip().splitlines()
        assert proc.exit_code == 2 and len(lines) == 1 and says in lines[0], proc.output
    assert (bad / "scale.json").read_bytes() == b"\xff\xfe not json"  # inputs never modified


# ---- the packaged H200 calibration, and the question on CUDA answered without any file from the user --------

def test_the_packaged_calibration_is_the_recorded_sweep(recorded: Path) -> None:
    """rssprobe/data/calibrations/h200-default.json holds the recorded H200 runs' figures (the sweep and the same
    check's default run at 16.8 M params) as the archive has them, with its provenance; unpacked it estimates what
    the archive's directories estimate."""
    shipped = calibration.load(calibration.packaged("h200-default"), {})
    assert shipped.provenance["gpu"] == "NVIDIA H200" and shipped.provenance["deepspeed"] == "0.19.8"
    assert shipped.provenance["torch"].startswith("2.11.0") and shipped.provenance["date"] == "2026-11-30"
    sweep = calibration.load(recorded / "h200" / "runs0" / "scale-default", {})
    extra = _point(recorded / "h200" / "runs0" / "default-baseline")
    for mine, theirs in zip(shipped.points, [*sweep.points, extra], strict=True):
        assert (mine.params, mine.baseline, mine.after_model, mine.init_peak, mine.rss_steps, mine.peak_steps,
                mine.roles, mine.zero, mine.rule) == (theirs.params, theirs.baseline, theirs.after_model,
                                                      theirs.init_peak, theirs.rss_steps, theirs.peak_steps,
                                                      theirs.roles, theirs.zero, theirs.rule)
    whole = Calibration(**{**vars(sweep), "points": [*sweep.points, extra]})
    assert estimate.estimate(_target(shipped, 32), shipped)["node"] == estimate.estimate(_target(whole, 32),
                                                                                         whole)["node"]


def test_llama_2_7b_on_8_gpus_as_typed(tmp_path: Path) -> None:
    """`estimate --model llama-2-7b --gpus-per-node 8 --node-ram 192G`: no file from the user (the packaged H200
    calibration), the answer first, the provenance of every term, DeepSpeed's formula whose figure is its own
    estimator's, the fit per phase (192 GiB does not hold the 205 GiB initialize peak of eight fp32 copies),
    the changes that would make it fit (zero.Init), and the provision line last."""
    proc = _cli(["estimate", "--model", "llama-2-7b", "--gpus-per-node", "8", "--node-ram", "192G", "--format",
                 "json", "--load-dtype", "fp32"], tmp_path / "root")
    assert proc.exit_code == 0, proc.output
    got = json.loads(proc.stdout)
    assert got["answer"][0].startswith("llama-2-7b (6.74 B params, loaded in fp32) at ZeRO-2 on 8 GPUs per node "
                                       "needs about")
    assert "in 192 GiB (--node-ram) it does not fit during initialize" in got["answer"][0]
    assert got["calibration"]["provenance"]["gpu"] == "NVIDIA H200" and got["target"]["accelerator"] == "cuda"
    terms = {**got["measured_terms"], **got["predicted_terms"]}
    assert set(terms) >= {"baseline", "fixed", "per_parameter_residual", "step_transient", "initialize_transient",
                          "model_copy", "roles", "pinned_slack", "deepspeed_estimate"}
    # the GPU sweep's terms name it; the load and the saves (it neither loads nor saves) the CPU save/load sweep's
    cpu = {"checkpoint_load", "checkpoint_save", "model_save_write"}
    assert all("NVIDIA H200" in terms[t] and "2026-11-30" in terms[t] for t in set(got["measured_terms"]) - cpu)
    assert all("CPU save/load calibration" in got["measured_terms"][t] for t in cpu)
    assert got["deepspeed_formula"]["bytes"] == pytest.approx(got["deepspeed_estimate_bytes"], abs=1)
    assert "model-copy term" in got["deepspeed_formula"]["reconciled"]
    phases = {r["phase"]: r for r in got["phases"]}
    assert phases["initialize"]["verdict"] == "does not fit" and phases["checkpoint load"]["measured"]
    # below ZeRO-3 every rank clones the 16-bit model for the Trainer's final save: 8 x 13.5 GB on the steady RSS
    assert got["provision"]["phase"] == "final model save" and got["provision"]["bytes"] > 192 * 2**30
    fixes = {c["change"]: c for c in got["changes"]}
    assert fixes["zero.Init"]["fits"] and fixes["zero.Init"]["saving_bytes"] > 25 * 2**30
    # the final save decides the peak, on top of the steady RSS with its pinned slack: pinning exactly saves at most
    # that slack (the eight fp32 copies during initialize, before anything is pinned, are the next phase down)
    slack = got["node"]["pinned_slack_bytes"]
    assert slack > 16 * 2**30 and 0 < fixes["pinned buffers at their own size"]["saving_bytes"] <= slack + 1
    text = _cli(["estimate", "--model", "llama-2-7b", "--gpus-per-node", "8", "--node-ram", "192G", "--load-dtype",
                 "fp32"], tmp_path / "root").stdout.strip().splitlines()
    assert text[0].startswith("llama-2-7b") and text[-1].startswith("provision at least ") and \
        text[-1].endswith("GiB per node (highest phase: final model save (predicted for CUDA), upper 95%)")


# ---- against real runs on this machine --------------------------------------------------------------------------

def _measured(run: Path, rank: int = 0, steps: int | None = None) -> dict[str, float]:
    s = Summary(RunDir(run), rank)
    done = s.steps[:steps]
    steady = [e["rss"] for e in done[1:]]
    step_peak = max(e["peak"] for e in done)
    init = s.by_kind["init"][0]
    return {"steady": sum(steady) / len(steady), "peak": max(step_peak, init["peak"]), "init_peak": init["peak"],
            "after_model": s.phase_events["after_model"]["rss"], "baseline": s.baseline["rss"], "params": s.params}


@pytest.mark.worker
def test_calibration_is_cached_and_estimates_one_rank(tiny_calibration: tuple[Path, dict[str, Any], str],
                                                      tiny_baseline: Path) -> None:
    """The first estimate calibrates (3 sizes of tiny below the target, one run each: the threshold is fixed, 12
    steps, into the estimate root, with its key in the contract's format) and estimates tiny's steady RSS and
    peak within 3% of a real tiny run."""
    root, got, stderr = tiny_calibration
    assert "calibrating tiny" in stderr
    [home] = list(root.iterdir())
    key = json.loads((home / "calibration.json").read_text())
    assert key["format"] >= 1 and key["key"]["malloc_env"] == {"MALLOC_MMAP_THRESHOLD_": "65536"}
    assert key["key"]["steps"] == 12 and key["key"]["repeat"] == 1
    assert got["calibration"]["params"] == [1_049_600, 2_099_200, 3_148_800]  # 1, 2, 3 layers of tiny's 4
    assert got["checks"] == [] and got["target"]["params"] == 4_198_400 and got["steps"] == 4
    truth = _measured(tiny_baseline)
    rank = got["rank"]
    assert abs(rank["steady_rss_bytes"] / truth["steady"] - 1) <= WITHIN
    assert abs(rank["peak_rss_bytes"] / truth["peak"] - 1) <= WITHIN
    assert rank["steady_rss_bytes_low"] <= rank["steady_rss_bytes"] <= rank["steady_rss_bytes_high"]
    # DeepSpeed's own estimator, asked with the run's sizes, gives the figure the run itself recorded
    assert got["deepspeed_estimate_bytes"] == pytest.approx(
        summary(tiny_baseline)["budget"]["estimator_bytes_per_param"] * truth["params"], rel=1e-9)


# make test-slow (a 2-rank calibration and a 2-rank run: minutes); its model-copy tolerance counts the baseline's
# run-to-run spread since it failed once on that slope beside other tests
@pytest.mark.slow
@pytest.mark.worker
def test_held_out_two_ranks_lie_inside_the_estimates_interval(tiny_calibration: tuple[Path, dict[str, Any], str],
                                                              tiny_two_ranks: Path) -> None:
    """A held-out known answer: a target of 2 ranks is calibrated at 2 ranks (the default: a process among several
    has costs a lone one lacks; from the one-rank calibration the ranks' peaks came out ~1 MB above its interval
    here), at 1-3 layers, never the target's 4; from it each rank of a real 2-rank run, and the node, lie inside the
    estimate's 95% intervals widened by the measurement's own error (a steady RSS is a mean of reads, a peak one
    read: READ_ERROR each, tests/noise.py; the node's figures are 2 ranks' sums: twice that), and each point within
    3%. The node's true peak lies between the orchestrator's sampled peak (a lower bound) and the ranks' exact peaks
    summed (what the estimate predicts); at initialize's entry each rank holds the whole model (4 B/param of fp32 as
    built)."""
    root, _one, _err = tiny_calibration
    proc = rssprobe("estimate", "tiny", "--ranks-per-node", "2", "--accelerator", "cpu", *STEADY_GLIBC, "--format",
                    "json", env={"RSSPROBE_ESTIMATE": str(root)}, check=True)
    assert "12 steps each, 2 rank(s)" in proc.stderr  # calibrated now, at 2 ranks (the one-rank one is cached)
    got = json.loads(proc.stdout)
    ranks = [_measured(tiny_two_ranks, r) for r in range(2)]
    node_truth = {k: sum(r[k] for r in ranks) for k in ("steady", "peak", "init_peak")}
    for view, truths, reads in ((got["rank"], ranks, 1), (got["node"], [node_truth], 2)):
        for truth in truths:
            for key, figure in (("steady", "steady_rss"), ("peak", "peak_rss"), ("init_peak", "initialize_peak")):
                low, high = view[f"{figure}_bytes_low"], view[f"{figure}_bytes_high"]
                slack = reads * noise.READ_ERROR
                assert low - slack <= truth[key] <= high + slack, (figure, low, truth[key], high)
                assert abs(view[f"{figure}_bytes"] / truth[key] - 1) <= WITHIN, figure
    sampled = summary(tiny_two_ranks)["node"]["peak_rss_bytes"]
    assert sampled * (1 - WITHIN) <= got["node"]["peak_rss_bytes"] <= node_truth["peak"] * (1 + WITHIN)
    # the whole model, fp32 as built: the slope over 3 equally spaced sizes is (last - first) / their span. Each
    # point is a run's absolute RSS after the model is built: one read, off by up to READ_ERROR (tests/noise.py),
    # on top of its run's pre-model baseline, which differs between identical runs by up to BASELINE_SPREAD
    # (measured: 0.14 MiB across 9 two-rank and 0.16 MiB across 9 one-rank calibration runs of the default
    # scenario, reports/estimate/heldout-misses.tar.gz; the model's own bytes above it agreed within 0.04 MiB).
    # So 2 x (READ_ERROR + BASELINE_SPREAD) / span: 0.41 B/param here (it was 2 x READ_ERROR alone, 0.25, which a
    # 2-rank calibration once exceeded beside other tests)
    sizes_ = estimate_plan.calibration_sizes(scenario.load("tiny"))
    copy_noise = 2 * (noise.READ_ERROR + BASELINE_SPREAD) / (sizes_[-1] - sizes_[0])
    assert abs(got["fits"]["model_copy"]["slope_bytes_per_param"] - 4.00) <= copy_noise
    entry = sum(r["after_model"] for r in ranks)  # the node at initialize's entry: a whole model on each rank
    assert abs(got["node"]["initialize_model_copy_bytes"] / entry - 1) <= WITHIN
    assert all(view[f"{k}_bytes_low"] >= view[f"{k}_bytes_floor"] for view in (got["rank"], got["node"])
               for k in ("steady_rss", "peak_rss", "initialize_peak"))


@pytest.mark.worker
def test_far_beyond_its_calibration_it_says_how_to_calibrate_nearer(
        tiny_calibration: tuple[Path, dict[str, Any], str]) -> None:
    """The issue's `--params 7e9 --ranks-per-node 8` (printed [-538.87, 1,095.26] GiB before): from the cached tiny
    calibration (nothing runs), 2,000x beyond it, no bound is negative or below the floor, no interval is wider
    than its figure, and a note gives the command that calibrates nearer, with sizes this machine holds and about
    how long it takes."""
    root, _one, _err = tiny_calibration
    proc = rssprobe("estimate", "tiny", "--params", "7B", "--ranks-per-node", "8", "--accelerator", "cpu",
                    "--calibration-ranks", "1", *STEADY_GLIBC, "--format", "json",
                    env={"RSSPROBE_ESTIMATE": str(root)}, check=True)
    assert "calibrating" not in proc.stderr
    got = json.loads(proc.stdout)
    assert got["far"] and got["target"]["params"] > 6.9e9
    for view in (got["rank"], got["node"]):
        for key in estimate.FIELDS.values():
            low, high, value = (view.get(f"{key}_bytes{s}") for s in ("_low", "_high", ""))
            if low is not None:
                assert 0 <= view[f"{key}_bytes_floor"] <= low <= value <= high and high - low <= value, key
    [note] = [n for n in got["notes"] if "calibrate nearer" in n]
    assert "--calibration-params" in note and " min" in note and "--params 7B" in note
