"""Wing: attention layouts (TP, CP, DPA, DOP; docs/models.md §3): :mod:`.crossover` (where one layout overtakes
another), :mod:`.transitions` (the cost of switching layout) and :mod:`.policy` (when a layout-switching policy
switches on a trace). Imports only the ground (``models.step``, ``models.queueing``).
"""
