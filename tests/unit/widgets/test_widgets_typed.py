"""Issue 20 §1.10: a slider an explorer shows can be typed into."""

from __future__ import annotations

import ipywidgets as W
import pytest

from llmexplore import widgets
from llmexplore.errors import SpecError


def test_a_typed_value_lands_on_the_slider_and_extends_it():
    s = widgets.choice_slider([1024, 2048, 4096], 2048, "context", "tokens")
    assert widgets.typed_value(s, "3,000") == 3000 and s.value == 3000
    assert [label for label, _ in s.options] == ["1,024 tokens", "2,048 tokens", "3,000 tokens", "4,096 tokens"]
    with pytest.raises(SpecError, match=r"context must be a whole number > 0 and at most 1e\+15, got '2.5'"):
        widgets.typed_value(s, "2.5")
    for bad in ("0", "1e30", "-4"):  # zero, huge: refused with the rule, the slider untouched
        with pytest.raises(SpecError, match=f"got '{bad}'"):
            widgets.typed_value(s, bad)
    assert s.value == 3000
    with pytest.raises(SpecError, match="got 'abc'"):
        widgets.typed_value(s, "abc")
    r = widgets.choice_slider([0.5, 1.0], 1.0, "rate", "req/s")
    assert widgets.typed_value(r, "0.75") == 0.75 and r.value == 0.75


def test_the_box_next_to_a_slider_puts_what_is_typed_on_it():
    s = widgets.choice_slider([8, 16, 32], 16, "batch")
    row = widgets.typed(s)
    assert isinstance(row, W.HBox) and row.children[0] is s
    box = row.children[1]
    box.value = "24"
    assert s.value == 24 and box.value == ""  # taken, and the box cleared
    box.value = "-3"
    assert s.value == 24 and box.layout.border == "1px solid #b00"  # refused, said on the box
    plain = W.Dropdown(options=["a", "b"])
    assert widgets.typed(plain) is plain
