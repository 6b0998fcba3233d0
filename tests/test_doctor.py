"""rssprobe doctor: what this machine can measure, and what holds its RAM that a run would measure against."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from rssprobe.run import host
from rssprobe.workflows import doctor

MIB = 1 << 20


def test_doctor_names_deepspeed_buffers_no_process_maps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed's shm_comm never unlinks its /dev/shm buffers: doctor counts those no process maps (here two
    files of 1 MiB in a stand-in directory) and leaves out one that this very process maps, as a live run's."""
    monkeypatch.setattr(host, "SHM_DIR", tmp_path)
    names = [f"deepspeed_allreduce_buffer_0_127.0.0.1_{port}_0" for port in (1001, 1002, 1003)]
    for name in names:
        (tmp_path / name).write_bytes(b"\0" * MIB)
    (tmp_path / "not_deepspeed").write_bytes(b"\0" * MIB)
    with open(tmp_path / names[2], "r+b") as f, mmap.mmap(f.fileno(), MIB) as live:
        live[0] = 1
        left = host.unmapped_deepspeed_shm()
        row = next(r for r in doctor.checks() if "DeepSpeed buffers" in r[0])
    assert left == [tmp_path / names[0], tmp_path / names[1]]
    assert row[1] is False and row[2].startswith("2 that no process maps hold 2 MiB"), row
    for name in names:  # the mapped one too: unmapped now, it would count
        (tmp_path / name).unlink()
    row = next(r for r in doctor.checks() if "DeepSpeed buffers" in r[0])
    assert row[1] is True and row[2] == "none"
