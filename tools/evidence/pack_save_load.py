"""Pack a CPU sweep that loads and saves into the save/load calibration rssprobe ships beside the H200 sweep
(rssprobe/data/calibrations/cpu-save-load.json, read by analysis/savephase.py): each run's load and save figures,
nothing else, with its provenance.

    python -m tools.evidence.pack_save_load reports/save-load-cpu/runs.tar.gz savecal savecal-z3 \
        > rssprobe/data/calibrations/cpu-save-load.json

The sweeps (reports/save-load-cpu/README.md has their commands): llama-small loaded from a bf16 checkpoint in bf16,
a few steps, then DeepSpeed's save_checkpoint and the consolidated 16-bit save, glibc's mmap threshold fixed; and
(savecal-z3) the same at ZeRO-3 on 2 ranks, loaded under zero.Init. The archive is unpacked into a temporary
directory and every run of each sweep named read as `rssprobe show` reads it; the first run's manifest gives the
provenance.
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from pathlib import Path

from rssprobe.analysis import readnoise, savephase
from rssprobe.analysis.summary import Summary
from rssprobe.analysis.sweep import Sweep


def main(archive: Path, *sweeps: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        runs = [run for sweep in sweeps for run in Sweep.load(Path(tmp) / sweep).runs()]
        points = []
        for run in runs:
            got = savephase.point(Summary(run))
            if isinstance(got, str):
                raise SystemExit(f"{run.path}: {got}")
            points.append(savephase.PhasePoint(**{**got.__dict__, "run": str(Path(got.run).relative_to(tmp))}))
        manifest = runs[0].manifest()
        command = json.loads((runs[0].path / "manifest.json").read_text()).get("command", [])
    host = manifest.host or {}
    scen = manifest.scenario or {}
    provenance = {"packaged": True, "date": str(manifest.started or "")[:10],
                  "machine": f"measured on {host.get('machine', '?')}, {host.get('cpu_count', '?')} CPUs "
                             f"({host.get('libc')})",
                  "source": f"{archive}: {', '.join(sweeps)} (packed by tools/evidence/pack_save_load.py)",
                  "command": " ".join(str(a) for a in command[1:])}
    ph = savephase.Phases(points, dict(manifest.versions or {}), str(scen.get("name")), dict(manifest.malloc_env or {}),
                          provenance, readnoise.of_host(host))
    return savephase.dumps(savephase.pack(ph))


if __name__ == "__main__":
    sys.stdout.write(main(Path(sys.argv[1]), *sys.argv[2:]))
