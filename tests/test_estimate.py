"""rssprobe estimate (issue 24): each rank's ZeRO partition computed from exact shapes, and host RAM per rank and
per node estimated from a calibration, against what real runs measured.

Truth here is recorded real runs (no training): the CPU runs of reports/cuda-pinned/runs.tar.gz (the default
scenario at 1, 2 and 8 ranks, ZeRO-3 with both offloads; DeepSpeed 0.19.8, their `partition` events, census
and pin requests) and the H200 size sweep of reports/gpu-check-h200/runs.tar.gz (CUDA: host and device roles
apart, RSS on a GPU machine); and two real tiny runs the session shares (tiny_baseline, tiny_two_ranks) against
one tiny calibration (tiny_calibration: 3 sizes, 2 steps each), all with glibc's mmap threshold fixed.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rssprobe.analysis import calibration, estimate, partition, stats
from rssprobe.analysis.calibration import Calibration
from rssprobe.analysis.partition import Zero
from rssprobe.analysis.pinrule import Rule
from rssprobe.analysis.summary import Summary
from rssprobe.cli import main
from rssprobe.config import modelshape, scenario
from rssprobe.store.rundir import RunDir
from rssprobe.workflows import estimate as workflow_estimate

from . import noise
from .conftest import STEADY_GLIBC, rssprobe, summary

REPORTS = Path(__file__).parents[1] / "reports"
MIB = 2**20
# The tolerance for an estimate against a measured run. The runs here fix glibc's mmap threshold: identical
# runs then agree within 0.02 B/param (README, "Noise"; 0.1 MiB at tiny's 4.2 M params, 0.02% of its ~470 MiB),
# so 3% is the bound, not the noise's: these are the "within 3%" rows, not the noise rows.
WITHIN = 0.03


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


def test_far_beyond_the_calibration_the_interval_widens_with_a_note(h200: Calibration) -> None:
    """1,000x past the largest calibrated size each fitted term's interval is widened by its whole per-parameter
    part, and a note says so; within 100x there is no such note."""
    near = estimate.estimate(_target(h200, 64), h200)  # 268 M params: 2x
    far_layers = 32_000  # 134 G params: 1,000x
    far = estimate.estimate(_target(h200, far_layers), h200)
    assert not any("widened" in n for n in near["notes"])
    assert any("1,000x" in n and "widened" in n for n in far["notes"])
    fit = estimate.fits(h200.points)["steady"]
    n = far["rank"]["partition_params"]
    plain = stats.predict(fit, n)
    assert far["rank"]["steady_rss_bytes_high"] - far["rank"]["steady_rss_bytes"] >= \
        (plain.high - plain.value) + abs(fit.slope * n) - 1


# ---- the command: bad input is one line, exit 2, before anything runs ------------------------------------------

def _cli(args: list[str], root: Path) -> Any:
    """The real command line, in this process (click's runner): its exit code and its own stderr."""
    return CliRunner().invoke(main, args, env={"RSSPROBE_ESTIMATE": str(root)})


@pytest.mark.parametrize(("args", "says"), [
    (["--params", "nan"], "nan"),
    (["--params", "-5"], "-5"),
    (["--params", "100"], "less than one layer"),
    (["--ranks-per-node", "0"], "0"),
    (["--accelerator", "tpu"], "tpu"),
    (["--ranks-per-node", "3000000"], "padding only"),
    (["--accelerator", "cuda"], "needs --calibration"),
    (["--calibration", "/nonexistent/dir"], "not a scale directory"),
    (["--torch-alloc-conf", "no_colon"], "KEY:VALUE"),
    (["--calibration-steps", "1"], "1 is not in the range x>=2"),
    (["--calibration", "/nonexistent/dir", "--calibration-steps", "12"], "--calibration DIR is measured already"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str, tmp_path: Path) -> None:
    argv = ["estimate", "tiny", *(["--ranks-per-node", "1"] if "--ranks-per-node" not in args else []), *args]
    proc = _cli(argv, tmp_path / "root")
    assert proc.exit_code == 2, proc.output
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert proc.exception is None or isinstance(proc.exception, SystemExit)  # no traceback
    assert not (tmp_path / "root").exists()  # nothing calibrated


def test_calibration_steps_are_in_the_cache_key_and_in_its_runs() -> None:
    """--calibration-steps 12 is a calibration of its own (never the cached 2-step one reused), and its runs make 12
    steps; the default key is the one cached calibrations made before the option have (steps 2)."""
    scen = scenario.load("tiny")
    info: Any = {"torch": "2.13.0", "deepspeed": "0.19.8"}
    keys = {n: workflow_estimate.calibration_key(workflow_estimate.Request("tiny", calibration_steps=n), scen, info,
                                                 "python3", []) for n in (2, 12)}
    assert keys[2]["steps"] == 2 and keys[12]["steps"] == 12
    assert workflow_estimate.calibration_dir(scen, keys[2]) != workflow_estimate.calibration_dir(scen, keys[12])
    assert "steps=12" in workflow_estimate.calibration_sets(workflow_estimate.Request("tiny", calibration_steps=12))


def test_zero3_over_ranks_from_a_one_rank_calibration_says_how_to_calibrate_it(h200: Calibration) -> None:
    """The H200 sweep is one rank, glibc's own threshold: a ZeRO-3 target at 2 ranks gets the note naming the
    target's steps; ZeRO-2, one rank, or a calibration with the threshold fixed do not."""
    [note] = workflow_estimate.ranks_note(3, 2, 12, h200)
    assert "--calibration-ranks 2 --calibration-steps 12" in note
    assert workflow_estimate.ranks_note(2, 2, 12, h200) == workflow_estimate.ranks_note(3, 1, 12, h200) == []
    fixed = Calibration(**{**vars(h200), "malloc_env": {"MALLOC_MMAP_THRESHOLD_": "65536"}})
    assert workflow_estimate.ranks_note(3, 2, 12, fixed) == []


def test_a_damaged_calibration_or_a_knob_its_torch_lacks_is_one_line(recorded: Path, tmp_path: Path) -> None:
    """A scale directory whose index is not JSON; a CUDA calibration given for a CPU target; torch 2.11 (the
    H200's) asked for a key first in 2.13: each refused before DeepSpeed is asked anything."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "scale.json").write_bytes(b"\xff\xfe not json")
    h200 = str(recorded / "h200" / "runs0" / "scale-default")
    for args, says in ((["--calibration", str(bad)], "scale.json"),
                       (["--calibration", h200], "measured on cuda"),
                       (["--accelerator", "cuda", "--calibration", h200, "--torch-alloc-conf",
                         "pinned_max_round_threshold_mb:1"], "first in torch 2.13")):
        proc = _cli(["estimate", "default", "--ranks-per-node", "8", *args], tmp_path / "root")
        lines = proc.stderr.strip().splitlines()
        assert proc.exit_code == 2 and len(lines) == 1 and says in lines[0], proc.output
    assert (bad / "scale.json").read_bytes() == b"\xff\xfe not json"  # inputs never modified


# ---- against real runs on this machine --------------------------------------------------------------------------

def _measured(run: Path, rank: int = 0) -> dict[str, float]:
    s = Summary(RunDir(run), rank)
    steady = [e["rss"] for e in s.steps[1:]]
    step_peak = max(e["peak"] for e in s.steps)
    init = s.by_kind["init"][0]
    return {"steady": sum(steady) / len(steady), "peak": max(step_peak, init["peak"]), "init_peak": init["peak"],
            "after_model": s.phase_events["after_model"]["rss"], "baseline": s.baseline["rss"], "params": s.params}


@pytest.mark.worker
def test_calibration_is_cached_and_estimates_one_rank(tiny_calibration: tuple[Path, dict[str, Any], str],
                                                      tiny_baseline: Path) -> None:
    """The first estimate calibrates (3 sizes of tiny below the target, one run each, into the estimate root, with
    its key in the contract's format) and estimates tiny's steady RSS and peak within 3% of a real tiny run."""
    root, got, stderr = tiny_calibration
    assert "calibrating tiny" in stderr
    [home] = list(root.iterdir())
    key = json.loads((home / "calibration.json").read_text())
    assert key["format"] >= 1 and key["key"]["malloc_env"] == {"MALLOC_MMAP_THRESHOLD_": "65536"}
    assert got["calibration"]["params"] == [1_049_600, 2_099_200, 3_148_800]  # 1, 2, 3 layers of tiny's 4
    assert got["checks"] == [] and got["target"]["params"] == 4_198_400
    truth = _measured(tiny_baseline)
    rank = got["rank"]
    assert abs(rank["steady_rss_bytes"] / truth["steady"] - 1) <= WITHIN
    assert abs(rank["peak_rss_bytes"] / truth["peak"] - 1) <= WITHIN
    assert rank["steady_rss_bytes_low"] <= rank["steady_rss_bytes"] <= rank["steady_rss_bytes_high"]
    # DeepSpeed's own estimator, asked with the run's sizes, gives the figure the run itself recorded
    assert got["deepspeed_estimate_bytes"] == pytest.approx(
        summary(tiny_baseline)["budget"]["estimator_bytes_per_param"] * truth["params"], rel=1e-9)


@pytest.mark.worker
def test_two_ranks_each_rank_and_the_node(tiny_calibration: tuple[Path, dict[str, Any], str],
                                          tiny_two_ranks: Path) -> None:
    """From the same (cached: nothing runs) one-rank calibration: each rank of a real 2-rank run and the node within
    3%; the node's peak during initialize within 3% of its ranks' exact initialize peaks summed; and at
    initialize's entry each rank holds the whole model (4 B/param of fp32 as built), so the node holds 2 copies."""
    root, _one, _err = tiny_calibration
    proc = rssprobe("estimate", "tiny", "--ranks-per-node", "2", *STEADY_GLIBC, "--format", "json",
                    env={"RSSPROBE_ESTIMATE": str(root)}, check=True)
    assert "calibrating" not in proc.stderr
    got = json.loads(proc.stdout)
    ranks = [_measured(tiny_two_ranks, r) for r in range(2)]
    for truth in ranks:
        assert abs(got["rank"]["steady_rss_bytes"] / truth["steady"] - 1) <= WITHIN
        assert abs(got["rank"]["peak_rss_bytes"] / truth["peak"] - 1) <= WITHIN
    node = got["node"]
    assert abs(node["steady_rss_bytes"] / sum(r["steady"] for r in ranks) - 1) <= WITHIN
    # the node's true peak lies between the orchestrator's sampled peak of the ranks' sum (a lower bound: samples
    # miss the top of a short peak: estimates from two calibrations read 2.9% and 3.2% above it on one run here) and the
    # ranks' exact peaks summed (an upper bound: the two peaks need not coincide); the estimate must fall there
    sampled = summary(tiny_two_ranks)["node"]["peak_rss_bytes"]
    exact_sum = sum(r["peak"] for r in ranks)
    assert sampled * (1 - WITHIN) <= node["peak_rss_bytes"] <= exact_sum * (1 + WITHIN)
    assert abs(node["initialize_peak_bytes"] / sum(r["init_peak"] for r in ranks) - 1) <= WITHIN
    # the whole model, fp32 as built: the slope over 3 equally spaced sizes is (last - first) / their span, two
    # single RSS reads each off by up to READ_ERROR (tests/noise.py), so 2 x READ_ERROR / span = 0.25 B/param here
    # (0.05 was tighter than that: 4.076 seen on a CI run); it still tells fp32 (4) from bf16 (2) or both (6)
    sizes = workflow_estimate.calibration_sizes(scenario.load("tiny"))
    copy_noise = noise.bound(2, int(sizes[-1] - sizes[0]))
    assert abs(got["fits"]["model_copy"]["slope_bytes_per_param"] - 4.00) <= copy_noise
    entry = sum(r["after_model"] for r in ranks)  # the node at initialize's entry: a whole model on each rank
    assert abs(node["initialize_model_copy_bytes"] / entry - 1) <= WITHIN
