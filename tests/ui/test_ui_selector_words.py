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


def test_the_prefix_line_says_which_layer_and_head_it_measures(
    qtbot, tmp_path, photo_files
) -> None:
    """The prefix-token line reads the Layer and Head selectors: both its numbers are the
    selected head's (the query's share and the share over all patch queries); under a method
    whose map reads neither, the line names the grid's layer and head it measures."""
    from conftest import random_vit
    from test_ui_window import WAIT_MS, new_window, settled, wait_shown

    from vitviz.checkpoints import load_checkpoint, save_checkpoint
    from vitviz.pipeline.analysis import analyze

    window = new_window(qtbot, tmp_path / "settings.ini")
    model = random_vit(image_size=64, patch_size=8, dim=48, depth=3, heads=3, seed=2)
    ckpt = save_checkpoint(model, tmp_path / "a.safetensors", class_names=list("abcde"))
    photo = photo_files["chelsea"]
    window.open_checkpoint(ckpt)
    window.open_image(photo)
    wait_shown(qtbot, window, photo.name)
    v = window.viewer
    a = analyze(load_checkpoint(ckpt), photo)
    v.controls.select(layer=1, head=2)
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    assert v.controls.selected_layer() == 1 and v.controls.selected_head() == 2
    share = float(a.attention[1, 2, 0, 0])  # the CLS query's attention to itself
    over = float(a.prefix_share[1, 2])  # head 2's, not the mean of the layer's heads
    assert abs(over - float(a.prefix_share[1].mean())) > 1e-3  # the two differ: it can fail
    assert v.controls.prefix_label.text() == (
        f"Prefix tokens: {share:.1%} of this query's attention in this layer "
        f"({over:.1%} over all patch queries)."
    )
    v.controls.select_method("rollout")  # its map reads no layer or head: the line says which
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    assert v.controls.layer_label.text() == "Grid layer"
    assert v.controls.prefix_label.text() == (
        f"Prefix tokens, outlined tile: {share:.1%} of this query's attention "
        f"({over:.1%} over all patch queries)."
    )
    assert "layer 1, head 2" in v.controls.prefix_label.toolTip()
    label = v.controls.prefix_label  # the line is whole at 1366 × 768, never cut
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() <= 1366, timeout=WAIT_MS)
    qtbot.wait(50)
    assert label.height() >= label.heightForWidth(label.width()) > 0
