"""Pack a recorded size sweep into the calibration rssprobe ships (rssprobe/data/calibrations/NAME.json): every
figure an estimate reads of each run (analysis/calibration.pack), nothing else, with its provenance.

    python -m tools.evidence.pack_calibration reports/gpu-check-h200/runs.tar.gz runs0/scale-default \
        reports/gpu-check-h200/gpu-check.json runs0/default-baseline > rssprobe/data/calibrations/h200-default.json

Runs after the sweep (EXTRA: run directories in the same archive, of the same scenario, machine and
configuration at another size) join its points: the H200 check's own run of the default scenario at 16.8 M
params is a fourth size, which leaves the fit 2 degrees of freedom instead of 1 (a t quantile of 4.3, not 12.7).

The archive is unpacked into a temporary directory and read as `rssprobe estimate --calibration DIR` reads it
(the ZeRO defaults of this Python's DeepSpeed, which must be the sweep's release); the GPU's name comes from the
check's gpu-check.json (`environment.device`).
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from pathlib import Path

from rssprobe.analysis import calibration
from rssprobe.analysis.summary import Summary
from rssprobe.run import dsinfo
from rssprobe.store.rundir import RunDir


def main(archive: Path, sweep: str, check: Path, extra: list[str]) -> str:
    env = json.loads(check.read_text())["environment"]
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        info = dsinfo.ask(sys.executable, {"params": 1, "largest_layer": 1, "ranks_per_node": 1, "nodes": 1,
                                           "stage": 2, "offload_param": False})
        cal = calibration.load(Path(tmp) / sweep, info["zero_defaults"])
        if info["deepspeed"] != cal.versions.get("deepspeed"):
            raise SystemExit(f"this Python's DeepSpeed is {info['deepspeed']}, the sweep's "
                             f"{cal.versions.get('deepspeed')}: its ZeRO defaults may differ")
        for run in extra:
            got = calibration.point(Summary(RunDir(Path(tmp) / run)), info["zero_defaults"])
            if isinstance(got, str):
                raise SystemExit(f"{run}: {got}")
            same = got.zero == cal.points[0].zero and got.rule == cal.points[0].rule
            if not same or RunDir(Path(tmp) / run).manifest().malloc_env != cal.malloc_env:
                raise SystemExit(f"{run}: not the sweep's configuration")
            cal.points.append(got)
        manifest = json.loads(next((Path(tmp) / sweep).glob("params-*/run-01/manifest.json")).read_text())
        for p in cal.points:  # paths inside the archive, not the temporary directory
            object.__setattr__(p, "run", str(Path(p.run).relative_to(tmp)))
    host = manifest.get("host") or {}
    provenance = {"packaged": True, "gpu": env.get("device"), "cuda": env.get("cuda"),
                  "torch": cal.versions.get("torch"), "deepspeed": cal.versions.get("deepspeed"),
                  "date": str(manifest.get("started", ""))[:10],
                  "machine": f"{env.get('device')} machine, {host.get('cpu_count')} CPUs, "
                             f"{(host.get('mem_total_bytes') or 0) / 2**30:,.0f} GiB ({host.get('libc')})",
                  "memory_bytes": host.get("mem_total_bytes"),
                  "source": f"{archive}: {sweep}" + "".join(f", {run}" for run in extra)
                            + " (packed by tools/evidence/pack_calibration.py)",
                  "command": " ".join(str(a) for a in manifest.get("command", [])[1:])}
    return calibration.dumps(calibration.pack(cal, provenance))


if __name__ == "__main__":
    sys.stdout.write(main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4:]))
