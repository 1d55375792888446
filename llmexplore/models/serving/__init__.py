"""Wing: serving (docs/models.md §4-§5): :mod:`.workload` (traffic), :mod:`.disagg` (prefill and decode sides,
co-located vs disaggregated latency, pool sizing), :mod:`.capacity` (the planner's rate and pool numerics) and
the iteration-level serving simulator: :mod:`.step_tables`, :mod:`.engines` (the engine seam: scheduler knobs,
request states, :class:`~.engines.EnginePolicy`), :mod:`.batcher` (one instance's loop) and :mod:`.simulator`
(colocated and disaggregated runs). Imports only the ground.
"""
