"""Figure builders: tidy results in, ``go.Figure`` out. No model computations, no ``.show()``, no files.

One module per area (:mod:`.layouts`, :mod:`.disagg`, :mod:`.moe`); the shared style lives here. Every figure has
unit-bearing axis titles and a legend; a layout or serving mode keeps one colour throughout the workbook.
The live explorers (:mod:`llmexplore.widgets`) start from these same builders and update traces by name.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..errors import SpecError

__all__ = ["TEMPLATE", "ref_line", "base", "trace", "layouts", "disagg", "moe"]

TEMPLATE = "plotly_white"


def ref_line(fig: go.Figure, *, y=None, x=None, span, name: str, color: str = "#c00", dash: str = "dash",
              row=None, col=None, showlegend: bool = True) -> None:
    """A horizontal (``y``) or vertical (``x``) reference line drawn as a named trace over ``span``.

    Used instead of ``add_hline(annotation_text=...)``: plotly places annotations on log axes in log10 units,
    which silently puts the label (and the autorange) at 10**value.
    """
    lo, hi = float(np.nanmin(span)), float(np.nanmax(span))
    xs, ys = ([lo, hi], [y, y]) if y is not None else ([x, x], [lo, hi])
    kw = {} if row is None else dict(row=row, col=col)
    fig.add_scatter(x=xs, y=ys, mode="lines", name=name, line=dict(color=color, dash=dash, width=1.5),
                    showlegend=showlegend, hoverinfo="name", **kw)


def base(fig: go.Figure, title: str, height: int = 420) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title=title, height=height, legend_title_text="",
                      margin=dict(l=70, r=30, t=70, b=60))
    return fig


def trace(fig: go.Figure, name: str):
    """The trace called ``name`` in ``fig`` (SpecError listing the names if there is none): explorers update
    traces by name, never by position."""
    for tr in fig.data:
        if tr.name == name:
            return tr
    raise SpecError(f"trace must be one of {[tr.name for tr in fig.data]}, got {name!r}")


from . import disagg, layouts, moe  # noqa: E402  (area modules use the style above)
