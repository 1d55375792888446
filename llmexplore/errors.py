"""Typed errors. Every error llmexplore raises on purpose derives from :class:`LlmexploreError`, and each
also subclasses the builtin a caller would expect to catch.

* :class:`SpecError` (ValueError): a spec, preset or input violates a rule. The message names the field, the
  value and the rule.
* :class:`UnsupportedPDLayoutError` (a SpecError, so a ValueError): a prefill/decode layout pair, buffer layout,
  plan or wire frame of the KV transfer planner (:mod:`llmexplore.transfer`) breaks a rule.
* :class:`UnknownPresetError` (KeyError): no preset of that name; the message lists the known names.
* :class:`ReportError` (RuntimeError): building the HTML reports failed (which notebook, which cell, why).
* :class:`UsageError` (TypeError): a workbook helper was called with the wrong kind of argument (e.g.
  recording a DataFrame, displaying something that is not a widget); a programming error in a notebook.

A question without an answer (for example, no layout fits in memory) is not an error: the result says so,
with a reason (``feasible = False``, ``best: none fits``).
"""

from __future__ import annotations


class LlmexploreError(Exception):
    """Base class of every error raised on purpose by llmexplore."""


class SpecError(LlmexploreError, ValueError):
    """A spec, preset file or user input breaks a rule."""


class UnsupportedPDLayoutError(SpecError):
    """The KV transfer planner cannot serve this layout pair, buffer, plan or wire frame (the message names the
    field, the value and the rule). The name and its ValueError base match the runtime planner's (TokenSpeed
    ``transfer_plan.UnsupportedPDLayoutError``)."""


class UnknownPresetError(LlmexploreError, KeyError):
    """No preset with that name. ``str()`` gives the plain message (KeyError would quote it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ReportError(LlmexploreError, RuntimeError):
    """One or more notebooks failed to execute or export; the message names each notebook, cell and error."""


class UsageError(LlmexploreError, TypeError):
    """A workbook helper was called with the wrong kind of argument; the message names it and what is allowed."""
