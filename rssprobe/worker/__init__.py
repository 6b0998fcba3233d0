"""The code that runs inside the training process (`python -m rssprobe.worker RUN_DIR`, or a user's own launcher's
ranks through launched/sitecustomize.py): the probes, the code sites, the census, the interventions, the events.

It imports the contract (rssprobe.contract) and nothing else of rssprobe, and imports torch and DeepSpeed only
once the process-start probe is taken; this file imports nothing, so `import rssprobe.worker.x` costs only x.
"""
