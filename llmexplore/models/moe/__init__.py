"""Wing: MoE expert parallelism (docs/models.md §4.8): :mod:`.routing` (routing laws, per-rank loads),
:mod:`.eplb` (redundant hot experts, EPLB placement) and :mod:`.decode` (a decode step of pure TP, TP x EP or
DPA + EP under skew). Imports only the ground.
"""
