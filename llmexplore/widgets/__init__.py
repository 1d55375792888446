"""Live explorers: ipywidgets controls + plotly FigureWidgets redrawn in place.

Each builder returns an explorer with ``controls`` (dict of widgets), ``figures`` (FigureWidgets),
``status`` (an HTML line: the headline or a readable error), ``view`` (the box to display) and ``update()``.
``update()`` calls the same model and sweep functions as the static figures; it never raises into the
widget: bad combinations (ranks that do not divide the heads, nothing fits) are reported in ``status``.
Widgets can be driven without a browser: set ``controls[name].value`` and the figures update.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import ipywidgets as W
import plotly.graph_objects as go

from ..errors import LlmexploreError  # noqa: F401

__all__ = ["Explorer", "log_options", "layouts", "disagg", "moe"]



@dataclass
class Explorer:
    """Controls, live figures, a status line and the box that displays them; ``update()`` redraws."""

    controls: dict[str, W.ValueWidget]
    figures: dict[str, go.FigureWidget]
    status: W.HTML
    view: W.Widget
    fixed: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)

    def params(self) -> dict:
        return {k: w.value for k, w in self.controls.items()}

    def fail(self, exc: Exception) -> None:
        """Show a readable error in the status line instead of raising into the widget."""
        self.status.value = f'<span style="color:#b00">Cannot evaluate: {html.escape(str(exc))}</span>'
        self.last = {"error": str(exc)}

    def connect(self) -> "Explorer":
        """Redraw on every control change, draw once, and return self."""
        for w in self.controls.values():
            w.observe(self.update, names="value")
        self.update()
        return self

    def update(self, *_) -> None:  # pragma: no cover - every explorer overrides it
        raise NotImplementedError


def log_options(lo: int, hi: int) -> list[int]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return out


from . import disagg, layouts, moe  # noqa: E402  (area modules build on Explorer)
