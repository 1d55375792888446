"""Wing: KV offload to storage (docs/models.md §6): :mod:`.cost` (load vs recompute, break-even) and
:mod:`.preload` (lookahead preloading, bounded staging). Imports only the ground.
"""
