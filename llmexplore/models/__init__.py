"""Pure, vectorised model functions: numpy in, numpy out. No plotting, widgets or I/O.

A ground floor and four wings (``tests/unit/test_layers.py`` enforces the rule):

* ground: :mod:`.step` (one forward iteration priced per kernel: the deployment, the decode step, prefill,
  kernels, collectives, sampler, KV bytes, stats, uncertainty) and :mod:`.queueing` (pure queueing maths);
* wings: :mod:`.layouts` (attention layouts: crossovers, transitions, the layout-switching policy),
  :mod:`.moe` (routing, EPLB, the MoE decode step), :mod:`.serving` (workloads, disaggregated pools, capacity,
  the serving simulator) and :mod:`.offload` (KV offload cost, preloading).

The wings import the ground and never one another. Nothing here reads a file: measured kernel tables and their
fits come from :mod:`llmexplore.measured`, and preset names are resolved only at :mod:`.step.engine`.
"""
