"""The CAM family's target-layer picker beside the method (DESIGN §5): shown only for a method
that takes a layer, offering auto, the last block's parts and every block's; a layer picked or
typed becomes the method's ``layer`` parameter (kept per method) and asks for new maps; a text
that is no layer goes back to the last one."""

from __future__ import annotations

from vitviz.ui.cam_layer_picker import CamLayerPicker
from vitviz.ui.controls import ViewControls
from vitviz.workers.jobs import method_table


def test_the_picker_offers_every_blocks_parts_and_takes_a_typed_layer(qtbot) -> None:
    picker = CamLayerPicker()
    qtbot.addWidget(picker)
    picker.set_blocks(3)
    offered = [picker.itemData(i) for i in range(picker.count())]
    assert offered[:4] == ["auto", "-1.norm1", "-1.norm2", "-1.output"]
    assert offered[4:] == [f"{b}.{p}" for b in range(3) for p in ("norm1", "norm2", "output")]
    seen: list[str] = []
    picker.chosen.connect(seen.append)
    picker.setCurrentIndex(offered.index("1.norm2"))
    picker.activated.emit(picker.currentIndex())
    assert seen == ["1.norm2"] and picker.layer() == "1.norm2"
    picker.lineEdit().setText("2")  # a bare block: its output
    picker.lineEdit().editingFinished.emit()
    assert seen == ["1.norm2", "2.output"]
    picker.lineEdit().setText("2.norm7")  # no layer: back to the last one, nothing asked
    picker.lineEdit().editingFinished.emit()
    assert seen == ["1.norm2", "2.output"] and picker.currentText() == "2.output"


def test_the_picker_is_beside_the_method_for_cam_methods_only(qtbot) -> None:
    controls = ViewControls()
    qtbot.addWidget(controls)
    controls.show()
    controls.set_methods(method_table())
    controls.set_shape(4, 2)
    picker = controls.cam_layer
    controls.select_method("attention")
    assert not picker.isVisibleTo(controls)
    controls.select_method("scorecam")
    assert picker.isVisibleTo(controls) and picker.layer() == "auto"
    assert "layer" not in controls.param_panel.widgets  # not a second control below
    with qtbot.waitSignal(controls.paramsChanged):
        picker.lineEdit().setText("1.norm1")
        picker.lineEdit().editingFinished.emit()
    assert controls.param_panel.current() == {"layer": "1.norm1"}
    controls.select_method("layercam")  # each method keeps its own layer
    assert picker.layer() == "auto"
    controls.select_method("scorecam")
    assert picker.layer() == "1.norm1"
    assert picker.count() == 1 + 3 * 5  # auto, the last block's three, four blocks' three


def test_the_picker_says_what_auto_reads_and_which_norm1_follows_its_attention(qtbot) -> None:
    """On a post-norm model (DESIGN §5) ``auto`` names the layer it reads and each post-norm
    block's norm1 is worded as the norm after its attention; the values stay the layers'."""
    picker = CamLayerPicker()
    qtbot.addWidget(picker)
    picker.set_blocks(3, "2.output", (0, 1, 2))
    texts = [picker.itemText(i) for i in range(picker.count())]
    offered = [picker.itemData(i) for i in range(picker.count())]
    assert texts[:4] == ["auto (2.output)", "-1.norm1 (last block, after its attention)",
                         "-1.norm2 (last block)", "-1.output (last block)"]  # fmt: skip
    assert texts[4:7] == ["0.norm1 (after its attention)", "0.norm2", "0.output"]
    assert offered[:2] == ["auto", "-1.norm1"] and offered[4] == "0.norm1"
    assert picker.currentText() == "auto (2.output)" and picker.layer() == "auto"
    picker.set_blocks(3, "2.norm1")  # a pre-norm model: its norm1s are the tokens read
    texts = [picker.itemText(i) for i in range(picker.count())]
    assert texts[:2] == ["auto (2.norm1)", "-1.norm1 (last block)"] and texts[4] == "0.norm1"
    assert picker.words("auto") == "auto (2.norm1)" and picker.words("1.norm1") == "1.norm1"
