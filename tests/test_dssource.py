"""DeepSpeed's answer for an estimate read from its installed source (run/dssource.py) is the answer the worker's
DeepSpeed gives when imported (rssprobe.worker.dsinfo), so a first estimate on a fresh machine imports neither
torch, transformers nor DeepSpeed. Behaviour, not speed: compared with the live answer, and sys.modules checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rssprobe.run import dssource
from tests.test_estimate_fast import HEAVY, ROOT, _env

# stages 1-3, one and several nodes, parameters offloaded or not, a rank count that divides nothing evenly
REQUESTS = [
    {"params": 30_532_122_624, "largest_layer": 311_164_928, "ranks_per_node": 8, "nodes": 1, "stage": 2,
     "offload_param": False},
    {"params": 70_553_706_496, "largest_layer": 1_050_673_152, "ranks_per_node": 8, "nodes": 4, "stage": 3,
     "offload_param": True},
    {"params": 70_553_706_496, "largest_layer": 1_050_673_152, "ranks_per_node": 3, "nodes": 2, "stage": 3,
     "offload_param": False},
    {"params": 123_457, "largest_layer": 101, "ranks_per_node": 2, "nodes": 3, "stage": 1, "offload_param": False},
]


def test_the_read_answer_is_deepspeeds_own() -> None:
    """The live answer: the installed DeepSpeed imported in a fresh interpreter (rssprobe.worker.dsinfo.ask)."""
    code = ("import json, sys\nfrom rssprobe.worker import dsinfo\n"
            "print(json.dumps([dsinfo.ask(r) for r in json.loads(sys.argv[1])]))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(REQUESTS)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=_env())
    assert proc.returncode == 0, proc.stderr
    live = json.loads(proc.stdout.splitlines()[-1])
    read = [dssource.answer(sys.executable, r) for r in REQUESTS]
    assert read == live


def test_another_python_is_asked() -> None:
    """Another Python's packages are its own to say: not read here."""
    assert dssource.answer("/no/such/python", REQUESTS[0]) is None


def test_an_estimator_that_needs_more_than_builtins_is_not_run(tmp_path: Path) -> None:
    """Only arithmetic on builtins is compiled and run alone; anything else: DeepSpeed itself is asked."""
    source = tmp_path / "stage3.py"
    source.write_text("import math\n\ndef est(n):\n    return math.ceil(n * 1.5), 0\n\n"
                      "def plain(n, k=2):\n    x = n * max(k, 3)\n    return int(x), 0\n")
    assert dssource._estimator(source, "est") is None
    assert dssource._estimator(source, "plain")(5) == (15, 0)


def test_a_cold_answer_imports_none_of_the_heavy_packages(fresh_cache: Path) -> None:
    """A fresh machine's cache root (empty where rssprobe/data/shapes.json is for the installed transformers; else
    what make install's `tools.shapes --warm` computed: tests/conftest.py), a packaged model on 8 GPUs: the whole
    answer (exit 0) with neither torch, transformers nor DeepSpeed imported in rssprobe's process, and no DeepSpeed
    subprocess's answer kept (none was asked)."""
    code = ("import sys\nfrom rssprobe.cli import main\n"
            "try:\n    main(['estimate', '--model', 'qwen3-30b-a3b', '--gpus-per-node', '8', '--stage', '2',"
            " '--node-ram', '1.5T'])\nexcept SystemExit as e:\n    print('EXIT', e.code)\n"
            f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**_env(), "RSSPROBE_CACHE": str(fresh_cache)})
    assert "fits in 1,536 GiB" in proc.stdout and "EXIT 0" in proc.stdout, proc.stdout + proc.stderr
    assert "HEAVY []" in proc.stdout
    assert not (fresh_cache / "dsinfo").exists()
