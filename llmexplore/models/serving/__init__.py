"""Wing: serving (docs/models.md §4-§5): :mod:`.workload` (traffic), :mod:`.disagg` (prefill and decode sides,
co-located vs disaggregated latency, pool sizing), :mod:`.capacity` (the planner's rate and pool numerics) and
:mod:`.simulator` (the iteration-level serving simulator). Imports only the ground.
"""
