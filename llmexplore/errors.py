"""Typed errors. Each also subclasses the builtin a caller would expect to catch.

* :class:`SpecError` (ValueError): a spec, preset or input violates a rule. The message names the field, the
  value and the rule.
* :class:`UnknownPresetError` (KeyError): no preset of that name; the message lists the known names.
* :class:`InfeasibleError` (RuntimeError): a question with no answer (for example nothing fits in memory).
"""

from __future__ import annotations


class LLMExploreError(Exception):
    """Base class of every error raised on purpose by llmexplore."""


class SpecError(LLMExploreError, ValueError):
    """A spec, preset file or user input breaks a rule."""


class UnknownPresetError(LLMExploreError, KeyError):
    """No preset with that name. ``str()`` gives the plain message (KeyError would quote it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InfeasibleError(LLMExploreError, RuntimeError):
    """A question with no feasible answer (e.g. the model does not fit at any batch)."""
