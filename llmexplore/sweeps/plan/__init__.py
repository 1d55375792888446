"""The deployment planner: from a model, a GPU type and budget, a workload and latency targets to every
configuration's throughput and latency, the Pareto frontiers and the best configuration (docs/models.md §8).

The space (each axis from an area model):

* mode: colocated (chunked prefill, :func:`llmexplore.models.serving.disagg.colocated_from_tables`) or
  disaggregated (prefill pool + KV transfer + decode pool, :mod:`llmexplore.models.serving.capacity`);
* per side: ranks per instance (powers of two up to the scale-up domain; MoE models also 16-64 ranks of
  DP attention with experts over all ranks, the wide-EP layout), attention layout (TP; DPA and DOP on the
  decode side), weight and KV dtypes (shared by both sides: the KV cache crosses the link as it is);
* colocated chunk budget (max_num_batched_tokens), decode batch cap (the batch statistic at the operating
  point, rounded up: max_num_seqs), P:D pool sizes within the budget, the KV link.

Experts are always spread over every rank of an instance (EP = ranks: the step engine's MoE layout), so the
EP axis is the instance size. Prefill and colocated instances use TP attention (the step engine prices
chunked and full prefill with TP attention only).

Objective. Without a rate: the highest sustainable request rate within the budget and the targets, ranked by
output tokens/s per GPU. With a rate: the fewest GPUs that serve it within the targets (ties: more tokens/s
per user). Every configuration is a row, infeasible ones with a reason.

The package, one job a module: :mod:`.question` (the :class:`Question` and the search's axes), :mod:`.search`
(every configuration priced, frontiers, the best, the split over workers, a row's
:class:`~llmexplore.deployment.DeploymentConfig`), :mod:`.check` (the serving simulator's re-check),
:mod:`.capacity` (many questions to Parquet) and :mod:`.tables` (notebook 60's tables). What is imported here
is the planner's public API; the code lives in the modules.
"""

from .capacity import capacity_plan, capacity_task
from .check import (CDF_POINTS, SIM_REQUESTS, SIM_TOLERANCE, rank_checks, simulate_config, simulate_row,
                    simulate_top)
from .question import CHUNKS, Question
from .search import (TABLE_COLUMNS, best, config_of, configurations, frontiers, order_table, plan, question_tasks,
                     run_task)
from .tables import (MIX_COLUMNS, mix_table, AXIS_COLUMNS, CHECK_COLUMNS, CHECK_TOP, N_RATES, SWEEP_COLUMNS, TOP, axis_table, check_table,
                     highest_rate,
                     launch_arguments, planned_rate,
                     rate_grid, rate_sweep, shared_flags, simulate_best, top_table)

__all__ = ["Question", "CHUNKS", "plan", "configurations", "frontiers", "best", "config_of", "question_tasks",
           "run_task", "order_table", "TABLE_COLUMNS", "simulate_row", "simulate_top", "rank_checks", "simulate_config",
           "CDF_POINTS", "SIM_REQUESTS", "SIM_TOLERANCE", "capacity_task", "capacity_plan", "highest_rate",
           "planned_rate", "rate_grid", "rate_sweep", "launch_arguments", "shared_flags", "top_table",
           "simulate_best", "check_table", "SWEEP_COLUMNS", "CHECK_COLUMNS", "CHECK_TOP", "TOP", "N_RATES",
           "axis_table", "AXIS_COLUMNS", "mix_table", "MIX_COLUMNS"]
