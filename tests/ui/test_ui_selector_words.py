"""The Layer and Head selectors say what they drive (DESIGN §5, the method table): the map's
layer or head where the shown method's map reads it, else only the head grid's outlined tile
("Grid layer", "Grid head", the tooltip naming the method), from the table's parameters and
the kind's ignored ones, never from a method's name."""

from __future__ import annotations

from vitviz.ui.controls import ViewControls
from vitviz.workers.jobs import method_table


def _words(controls: ViewControls) -> tuple[str, str]:
    return controls.layer_label.text(), controls.head_label.text()


def test_the_selectors_say_whether_the_map_reads_them(qtbot) -> None:
    controls = ViewControls()
    qtbot.addWidget(controls)
    controls.set_methods(method_table())
    controls.set_shape(12, 12)
    controls.select_method("attention")
    assert _words(controls) == ("Layer", "Head")
    note = controls.param_panel.form.itemAt(0).widget()
    assert note.text() == "layer and head: the selectors above"
    controls.select_method("rollout")  # a map over every layer, the heads fused
    assert _words(controls) == ("Grid layer", "Grid head")
    tip = controls.head.toolTip()
    assert "head grid" in tip and "Attention rollout" in tip
    assert controls.layer_label.toolTip() == controls.layer.toolTip()
    controls.select_method("gradcam")  # its layer is the target-layer picker's
    assert _words(controls) == ("Grid layer", "Grid head")
    controls.select_method("token-norm")  # a layer, no head
    assert _words(controls) == ("Layer", "Grid head")
    note = controls.param_panel.form.itemAt(0).widget()  # its panel names the one it reads
    assert note.text() == "layer: the selector above"
    controls.select_method("dino-masks")
    assert _words(controls) == ("Layer", "Head")


def test_the_words_follow_the_table_and_the_kind(qtbot) -> None:
    controls = ViewControls()
    qtbot.addWidget(controls)
    table = method_table()
    controls.set_methods(table)
    for m in table:  # every method of the table: the words are its parameters'
        controls.select_method(m.name)
        takes = {p.name for p in m.parameters if p.per == p.name}
        want = tuple(w.capitalize() if w in takes else f"Grid {w}" for w in ("layer", "head"))
        assert _words(controls) == want, m.name
    # a kind whose version ignores the head (e.g. a model with one head per layer): grid only
    controls.select_method("attention")
    controls.param_panel.ignored = {"attention": {"head": "its layers have one head"}}
    controls.set_shape(4, 1)
    assert _words(controls) == ("Layer", "Grid head")
    assert "its layers have one head" in controls.head.toolTip()
