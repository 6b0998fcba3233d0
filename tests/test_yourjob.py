"""Issue 42 (items 1-5, 7): the ranks a launch command asks for, fine-tunes (trainable and frozen parameters),
the config as DeepSpeed read it, labels and logs. Fast tests here read real DeepSpeed config objects and real
torch modules (no mock of either); the worker tests run tiny real trainings and share them."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from rssprobe.analysis import answers, metrics
from rssprobe.analysis.compare import Side, differences
from rssprobe.contract.ranks import asked as ranks_asked
from rssprobe.contract.ranks import mismatch as rank_mismatch
from rssprobe.run import launchranks

from .conftest import rssprobe, summary
from .fakes_rundir import make_run

ROOT = Path(__file__).resolve().parent.parent
LINEAR = str(ROOT / "examples" / "train_linear.py")


@pytest.mark.parametrize(("before", "asked"), [
    (["accelerate", "launch", "--num_processes", "2"], (2, "accelerate")),
    (["accelerate", "launch", "--num_processes=3", "--multi_gpu"], (3, "accelerate")),
    (["torchrun", "--nproc-per-node", "2"], (2, "torchrun")),
    (["torchrun", "--nproc_per_node=2", "--nnodes", "2"], (4, "torchrun")),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node=2"], (2, "torchrun")),
    (["deepspeed", "--num_gpus", "2"], (2, "deepspeed")),
    (["deepspeed", "--num_gpus=2", "--num_nodes=2"], (4, "deepspeed")),
    (["mpirun", "-np", "4", "python"], (4, "mpi")),
    (["python"], None),  # a plain process: one rank, not a launcher's count
    (["torchrun", "--nproc-per-node", "auto"], None),  # not a count: nothing to compare
    (["torchrun", "--nnodes", "1:2", "--nproc-per-node", "2"], None),  # elastic: not one count
])
def test_the_ranks_a_launch_command_asks_for(before: list[str], asked: tuple[int, str] | None) -> None:
    assert launchranks.requested([*before, LINEAR, "--steps", "2"], LINEAR) == asked


def test_a_hostfile_counts_its_slots(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# nodes\nnode-a slots=4\nnode-b slots=2  # the small one\n\n")
    assert launchranks.requested(["deepspeed", "-H", str(hostfile), LINEAR], LINEAR) == (6, "deepspeed")
    assert launchranks.requested(["deepspeed", "--hostfile", str(hostfile), "--include", "node-a", LINEAR],
                                 LINEAR) is None  # filtered: not the file's count


def test_the_script_own_options_are_not_the_launcher_count() -> None:
    # --num_processes after the script is the script's own argument
    assert launchranks.requested(["accelerate", "launch", LINEAR, "--num_processes", "8"], LINEAR) is None


def test_a_mismatch_is_one_line_naming_both_numbers_and_the_cause() -> None:
    env = launchranks.environment(["accelerate", "launch", "--num_processes", "2", LINEAR], LINEAR)
    asked = ranks_asked(next(iter(env.values())))
    assert asked == (2, "accelerate")
    line = rank_mismatch(*asked, reached=1)
    assert "\n" not in line and "asks for 2 ranks but 1 reached" in line and "--multi_gpu" in line


def test_a_role_row_names_its_role() -> None:
    assert metrics.label("role.fp32_master") != metrics.label("role.adam_exp_avg")
    assert "fp32_master" in metrics.label("role.fp32_master")


def _summary(**over: object) -> dict[str, object]:
    s = {"scenario": "frozen_zero3", "params": 1_081_344, "world_size": 1, "steps_done": 3,
         "zero": {"stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"},
         "model": {"trainable_params": 32_768}}
    s.update(over)
    return s


def test_the_first_line_says_the_trainable_count_and_an_unknown_stage() -> None:
    what = answers._what(_summary())
    assert "1.1 M parameters, 32.8 k trainable (3.03%)" in what
    never = answers._what(_summary(zero={"stage": None, "offload_optimizer": None, "offload_param": None}))
    assert "ZeRO stage not known" in never and "ZeRO-None" not in never
    assert "trainable" not in answers._what(_summary(model={"trainable_params": 1_081_344}))  # not a fine-tune


def test_offload_devices_are_read_from_deepspeeds_parsed_values() -> None:
    """accelerate's DeepSpeedPlugin writes offload_param {device: none} at ZeRO-2: parsed by DeepSpeed's own
    config class, that is no offload (the object itself is not None, which read as 'cpu' before)."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    from rssprobe.worker.script import offload_device

    def engine(zero: dict[str, object]) -> object:
        return types.SimpleNamespace(_config=types.SimpleNamespace(zero_config=DeepSpeedZeroConfig(**zero)))

    plugin = engine({"stage": 2, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "none"}})
    assert offload_device(plugin, "offload_param") is None
    assert offload_device(plugin, "offload_optimizer") == "cpu"
    assert offload_device(engine({"stage": 3, "offload_param": {"device": "cpu"}}), "offload_param") == "cpu"
    assert offload_device(engine({"stage": 2}), "offload_optimizer") is None


def test_the_census_walks_a_modules_frozen_parameters() -> None:
    import torch

    from rssprobe.worker.census import FROZEN, _walk

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    model[0].requires_grad_(False)
    holder = types.SimpleNamespace(module=model)
    found = list(_walk(holder, ["module", FROZEN]))
    assert [p.shape for p in found] == [model[0].weight.shape, model[0].bias.shape]


def test_diff_lists_a_rank_count_difference_first(tmp_path: Path) -> None:
    a = make_run(tmp_path, run_id="one")
    b = make_run(tmp_path, run_id="two")
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["world_size"] = 2
    manifest["scenario"]["world_size"] = 2
    (b / "manifest.json").write_text(json.dumps(manifest))
    what = differences(Side.load(str(a)), Side.load(str(b)))
    assert what[0] == ("ranks", 1, 2)
    assert not any(w == "scenario world_size" for w, _x, _y in what)  # said once


# ---- worker tests: tiny real trainings ------------------------------------------------------------------------
FROZEN = ROOT / "tests" / "data" / "scripts" / "frozen_zero3.py"
BASE, TRAINED = 4 * (512 * 512 + 512), 4 * (512 * 8 + 8 * 512)  # the script's frozen base and its adapters


@pytest.mark.worker
def test_accelerate_without_multi_gpu_fails_with_one_line_naming_both_counts(tmp_path: Path) -> None:
    """Issue 42's reproducer: accelerate starts one plain process for --num_processes 2 without --multi_gpu; under
    rssprobe's one-process rendezvous it trained as 1 rank and came back ok. Refused before training (exit 2)."""
    import shutil
    import sys

    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    if accelerate is None:
        pytest.skip("accelerate is not installed")
    proc = rssprobe("run", "--out", str(tmp_path / "r"), "--", accelerate, "launch", "--num_processes", "2",
                    LINEAR, "--steps", "2", "--width", "256")
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "asks for 2 ranks but 1 reached DeepSpeed" in last and "--multi_gpu" in last
    assert "Traceback" not in last


@pytest.fixture(scope="module")
def frozen_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    run = tmp_path_factory.mktemp("yourjob") / "frozen"
    rssprobe("run", "--out", str(run), "--script", str(FROZEN), "--", "--steps", "2", check=True)

    return summary(run)


@pytest.mark.worker
def test_a_lora_shaped_zero3_run_shows_its_trainable_count_and_names_the_frozen_partitions(
        frozen_run: dict[str, object]) -> None:
    """Known answer: 32,768 of 1,083,392 parameters train; the frozen base's bf16 ZeRO-3 partitions are
    2 x 1,050,624 bytes (exact: the census counts tensor bytes); nothing of the model is left in `other`."""
    s = frozen_run
    params = BASE + TRAINED
    assert s["params"] == params and s["model"]["trainable_params"] == TRAINED
    assert "1.1 M parameters, 32.8 k trainable (3.02%)" in s["answer"][0]
    assert s["label"] == "frozen_zero3"  # the script's name, not "baseline"
    roles = s["budget"]["roles"]
    # resident bytes of whole pages: within a page per frozen tensor (8 tensors x 4 KiB) of 2 B/param
    assert abs(roles["frozen_partitions"] - 2 * BASE / params) <= 8 * 4096 / params
    assert roles.get("other", 0.0) < 0.05
    per_trained = s["budget"]["roles_per_trainable_param"]
    assert abs(per_trained["fp32_master"] - 4.0) < 0.01 and abs(per_trained["adam_exp_avg"] - 4.0) < 0.01
    assert s["zero"] == {"stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"}
    assert s["sites_first_step_only"] == []  # ZeRO-1/2's per-parameter sites: never called at ZeRO-3, not footnoted


@pytest.mark.worker
def test_a_lora_shaped_zero2_run_names_its_frozen_weights(tmp_path: Path) -> None:
    """Known answer at ZeRO-2 (1 rank): the frozen base is whole bf16 weights, 2 x 1,050,624 bytes, in no optimizer
    group (the ZeRO-1/2 optimizer never reaches them); they are the role frozen_weights, and `other` holds nothing
    of the model. Before the role they were `other`: 1.94 B/param of this model's 1,083,392."""
    run = tmp_path / "frozen2"
    rssprobe("run", "--out", str(run), "--script", str(FROZEN), "--", "--stage", "2", "--steps", "2", check=True)
    s = summary(run)
    params = BASE + TRAINED
    assert s["params"] == params and s["model"]["trainable_params"] == TRAINED
    roles = s["budget"]["roles"]
    # resident bytes of whole pages: within a page per frozen tensor (8 tensors x 4 KiB) of 2 B/param
    assert abs(roles["frozen_weights"] - 2 * BASE / params) <= 8 * 4096 / params
    assert roles.get("other", 0.0) < 0.05
    assert s["zero"]["stage"] == 2 and s["zero"]["offload_param"] is None


@pytest.mark.worker
@pytest.mark.slow
def test_a_two_rank_launcher_run_records_its_world_reads_offload_and_keeps_per_rank_logs(tmp_path: Path) -> None:
    """torchrun, 2 ranks (gloo), the script at ZeRO-2 with offload_param {device: none} as accelerate's plugin writes
    it: the recorded world is 2 (scenario too), no parameter offload, and each rank's output in its own log."""
    run = tmp_path / "zero2"
    rssprobe("run", "--out", str(run), "--", "torchrun", "--nproc-per-node", "2", str(FROZEN), "--stage", "2",
             "--steps", "2", check=True)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["scenario"]["world_size"] == 2
    assert manifest["scenario"]["zero"]["offload_param"] is None
    assert manifest["scenario"]["zero"]["offload_optimizer"] == "cpu"
    assert (run / "worker.rank0.log").is_file() and (run / "worker.rank1.log").is_file()
