"""Ground floor: one forward iteration priced per kernel (docs/models.md §1-§3).

:mod:`.engine` holds the one deployment type and the one kernel pricing, and is the only door from preset names
to specs inside ``models/``; :mod:`.decode` assembles a decode step, :mod:`.prefill` a prefill or mixed
iteration, from :mod:`.kernels`, :mod:`.collectives` and :mod:`.sampler`; :mod:`.kv_transfer` counts KV bytes per
request; :mod:`.stats` and :mod:`.uncertainty` are the statistics they share.
"""
