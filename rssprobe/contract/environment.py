"""The environment variables the orchestrator sets or clears for the processes it starts.

Part of the contract (rssprobe/contract/): stdlib only. (The test lane's variable is testlane.NO_WORKER_ENV, glibc's
steady setting glibc.STEADY_MALLOC_ENV, the native pin backend's interventions.DS_PIN_*_ENV.)"""

ORCHESTRATOR_ENV = "RSSPROBE_ORCHESTRATOR_PID"  # set by the launcher for the processes it starts
# torch's allocator settings (--torch-alloc-conf, the scenario's torch_alloc_conf): the worker is given the first;
# torch >= 2.9 reads the second before it, so an inherited one is removed from the worker's environment
TORCH_ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"
TORCH_ALLOC_CONF_NEWER_ENV = "PYTORCH_ALLOC_CONF"
# "N LAUNCHER": the ranks the user's launch command asks for and the launcher that was asked (contract/ranks.py;
# PYTHON-prefixed: DeepSpeed's launcher forwards such variables to other nodes)
RANKS_ENV = "PYTHON_RSSPROBE_RANKS"
# the directory of DeepSpeed ops built once and loaded by every environment of the same build key
# (worker/opreuse.py); empty: each environment builds its own
SHARED_OPS_ENV = "RSSPROBE_SHARED_OPS"
SHARED_OPS_PARTS = "parts.json"  # beside each shared library: its build key's parts (op, torch, deepspeed, ...)
