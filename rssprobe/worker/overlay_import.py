"""Import hook for source patches: modules present in the overlay load from there.

Installed before torch/DeepSpeed are imported. A patched package __init__ keeps the
installed package directory as its search path, so unpatched submodules load as usual.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType


class OverlayFinder(importlib.abc.MetaPathFinder):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.loaded: list[str] = []

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        rel = Path(*fullname.split("."))
        module_file = self.root / rel.with_suffix(".py")
        package_init = self.root / rel / "__init__.py"
        if module_file.is_file():
            self.loaded.append(fullname)
            return importlib.util.spec_from_file_location(fullname, module_file)
        if package_init.is_file():
            installed = self._installed_dir(fullname, path)
            self.loaded.append(fullname)
            return importlib.util.spec_from_file_location(fullname, package_init,
                                                          submodule_search_locations=installed)
        return None

    def _installed_dir(self, fullname: str, path: Sequence[str] | None) -> list[str]:
        """The installed directory of a package, found by the finders after this one."""
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path)
            if spec is not None and spec.submodule_search_locations:
                return list(spec.submodule_search_locations)
        return []


def install(root: Path) -> OverlayFinder:
    finder = OverlayFinder(root)
    sys.meta_path.insert(0, finder)
    return finder
