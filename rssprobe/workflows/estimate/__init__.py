"""`rssprobe estimate`: host RAM per rank and per node for a run nobody has made yet, and whether it fits.

The question as users ask it: a model (a scenario, `--model NAME` of the shipped public models, or `--hf-config
PATH`), its size (`--params 7B`), ZeRO stage, `--gpus-per-node G` (CUDA) or `--ranks-per-node R --accelerator
cpu` (a rank count alone is refused with a hint: "ranks" does not say where the buffers live), `--nodes K`, and
the node's RAM (`--node-ram`; for a CPU target on one node, this machine's). One job per module:

* request: what was asked, and the question it makes (where the buffers live, how many ranks a node);
* target: the target's scenario, exact shape and origin;
* checks: every refusal that comes before DeepSpeed is asked anything;
* plan: the calibration this machine makes (sizes, runs, ranks, steps; a proxy for a model too large) and its key;
* calibrate: the cached calibration, run, resumed or refused;
* terms: where each term comes from, the pinned-slack rule, the notes on what the calibration does not cover;
* job: the trainer's job applied to the answer (typed suggestions, how to measure a phase, zero.Init the other way);
* entry: run(), which puts them together.

A model too large to calibrate here (its one-layer model above plan.PROXY_ABOVE params: a published 7 B model) is
calibrated on a packaged proxy of its kind, said in the output. On CUDA the recorded H200 sweep ships as the default
(rssprobe/data/calibrations/h200-default.json); --calibration DIR|FILE takes any other.
"""
