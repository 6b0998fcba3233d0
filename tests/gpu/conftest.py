"""GPU checks: run only where CUDA exists; elsewhere every test here is skipped with the reason "no CUDA device".

Measured figures are collected in FIGURES and written as JSON to $RSSPROBE_GPU_JSON (tests/gpu/check.sh
points it under $OUT) at the end of the session, whatever passed or failed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

FIGURES: dict[str, Any] = {}
NO_CUDA = "no CUDA device"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped with the reason 'no CUDA device')")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)
            item.add_marker(pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA))


@pytest.fixture(scope="session")
def figures() -> Any:
    FIGURES.setdefault("environment", {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "DS_PIN_MEMORY_BACKEND": os.environ.get("DS_PIN_MEMORY_BACKEND", "torch (default)")})
    yield FIGURES
    path = os.environ.get("RSSPROBE_GPU_JSON")
    if path:
        Path(path).write_text(json.dumps(FIGURES, indent=2, sort_keys=True, default=str) + "\n")
