"""Isolated environments for other torch / DeepSpeed versions: one venv per spec, built once.

An environment lives under store.layout.envs_root()/<name> (default: the cache dir's envs/); its
name is derived from the spec (torch2.13.0-ds0.19.8), so the same spec always finds the same
venv. A marker file is written only after every install step succeeded: a directory without
it is a half-made env and is rebuilt. The worker needs only torch, DeepSpeed, ninja and
psutil there, since the launcher puts this checkout on its PYTHONPATH. Each env compiles
DeepSpeed's ops once into its own cache directory (run/host.ops_cache_dir keys by env), unless an
environment of the same build key has built them already (worker/opreuse.py: then loaded, not compiled).

spec: parsing a spec; store: the envs on disk and their lock; build: making one;
resolve: which Python --env/--python/--torch/--deepspeed mean.
"""

from ...store.layout import envs_root
from .build import create
from .resolve import for_versions, resolve_python
from .spec import (
           LIBRARIES,
           EnvSpec,
           Source,
           axis_values,
           check_pinned_libraries,
           check_versions,
           library_extras,
           library_requirement,
)
from .store import MARKER, Env, find, list_envs, remove

__all__ = [
           "LIBRARIES",
           "MARKER",
           "Env",
           "EnvSpec",
           "Source",
           "axis_values",
           "check_pinned_libraries",
           "check_versions",
           "create",
           "envs_root",
           "find",
           "for_versions",
           "library_extras",
           "library_requirement",
           "list_envs",
           "remove",
           "resolve_python",
]
