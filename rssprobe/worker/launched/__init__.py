"""What a rank started by the user's own launcher runs first: sitecustomize.py (this directory goes first on
PYTHONPATH; see its docstring)."""
