"""Ground floor: pure queueing maths (docs/models.md §5); imports nothing else from ``models/``.

:mod:`.core` (M/D/1, Erlang, Allen-Cunneen M/G/c), :mod:`.mg1` (M/G/1 with a service-time distribution),
:mod:`.fcfs_sim` (the discrete-event FCFS check of both) and :mod:`.at_stat` (a wait at a statistic: the one
vocabulary ``stat`` = mean, p50, p90 or p99 for every queue the planner, the P/D sizing and offload price).
"""
