"""A new user's walk across kinds: each model opened after another shows nothing the old one
left (DESIGN §6: a control, title or plot never keeps state that a newly opened model can't
have). The shipped model with a query in its last patch row, then a tiny ViT whose input is
smaller (32 px): the model input is shown whole, fitted to its view. At 1280 × 720 the walk
shipped → Swin → CLIP (prompts typed) → shipped, a CAM shown: the side panel is never cut
sideways and its wrapped labels show every line. Head importance asked on the shipped model,
then a backbone without a classifier: greyed with its reason (no class to measure), never run
and refused on each image; the shipped model again measures it. The compare window open on
relevance while model A becomes a Swin: relevance greyed there with the Swin's reason, the
nearest method shown, relevance back with the shipped model. A CAM's target layer typed on the
shipped model's last block (3.norm2), then a 2-block CLIP: the CLIP's last block (1.norm2) is
read, as the Layer selector and a start layer are; the shipped model gets 3.norm2 again.
Faithfulness greyed on the backbone; a folder's curves gone with the model that measured them.
A job's refusal about the last model ("this model's classes are its head's") leaves the
message bar when another model opens; a message about the drop that opened it stays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from clip_fixtures import CORPUS, learn_bpe, save_openai_files, tiny_clip
from conftest import CLASS_NAMES, random_vit
from swin_helpers import tiny_torchvision_swin
from test_ui_window import WAIT_MS, click, drop, settled, wait_shown
from window_watch import watched_window

from vitviz.checkpoints import save_checkpoint
from vitviz.core import resources
from vitviz.ui.canvas import ImageCanvas
from vitviz.ui.logit_lens_chart import NO_LENS
from vitviz.ui.main_window import MainWindow
from vitviz.ui.view_state import NO_CLASS_TO_EXPLAIN


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped model, a tiny ViT of a smaller input (32 px, a 4 × 4 grid), a tiny Swin
    (64 px, no CLS), a tiny CLIP folder (32 px, classes are prompts) and a tiny ViT without a
    classifier (a DINO-style backbone)."""
    from transformers import CLIPImageProcessor

    folder = tmp_path_factory.mktemp("kind-switch")
    shipped = resources.default_model_path()
    assert shipped is not None
    small = save_checkpoint(
        random_vit(seed=3), folder / "small.safetensors", class_names=CLASS_NAMES
    )
    swin = folder / "swin.pth"
    torch.save(tiny_torchvision_swin().state_dict(), swin)
    sidecar = swin.with_name(swin.name + ".vitviz.json")
    sidecar.write_text(json.dumps({"preprocessing": {"image_size": [64, 64]}}))
    vocab, merges = learn_bpe(CORPUS, merges=150)
    clip = folder / "tiny-clip"
    tiny_clip(len(vocab), seed=4).save_pretrained(clip)
    save_openai_files(clip, vocab, merges)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=32).save_pretrained(clip)
    backbone = save_checkpoint(random_vit(seed=5, num_classes=0), folder / "backbone.safetensors")
    return {
        "shipped": shipped,
        "small": small,
        "swin": swin,
        "clip": clip,
        "backbone": backbone,
    }


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    """The window with its own settings; the bug dialog must not open."""
    yield from watched_window(qtbot, tmp_path)


def fitted(canvas: ImageCanvas) -> bool:
    """The view shows its whole image and the image fills the view one way."""
    (x0, x1), (y0, y1) = canvas.vb.viewRange()
    r = canvas.image.mapRectToView(canvas.image.boundingRect())
    slack = 0.05 * max(r.width(), r.height())
    whole = x0 <= r.left() + slack and x1 >= r.right() - slack
    whole = whole and y0 <= r.top() + slack and y1 >= r.bottom() - slack
    return whole and max(r.width() / (x1 - x0), r.height() / (y1 - y0)) > 0.9


def open_model(qtbot, window: MainWindow, checkpoint: Path) -> None:
    drop(window, [checkpoint])
    qtbot.waitUntil(
        lambda: (
            window.model is not None and window.model.name == checkpoint.name and settled(window)
        ),
        timeout=WAIT_MS,
    )


def test_a_smaller_input_is_shown_whole_after_a_query_on_the_last(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    v = window.viewer
    drop(window, [photo_files["chelsea"], checkpoints["shipped"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    gh, gw = v.image.grid
    box = v.input_view
    click(box, box.vb.mapViewToScene(box.patch_rect(gh - 1, gw - 1).center()))
    qtbot.waitUntil(lambda: settled(window) and v.query == (gh - 1, gw - 1), timeout=WAIT_MS)
    old_side = v.image.input_pixels.shape[0]
    open_model(qtbot, window, checkpoints["small"])
    assert v.image.input_pixels.shape[0] < old_side  # the new input is smaller
    assert v.query is None
    assert fitted(v.input_view), v.input_view.vb.viewRange()
    assert fitted(v.map_view)


def side_panel_problems(window: MainWindow) -> list[str]:
    """What the Explain panel can't show: a sideways scroll (its right edge cut), a text cut
    (ui_fit's check), a wrapped label with fewer lines than its text needs."""
    from ui_fit import clipped_widgets

    v = window.viewer
    scroll = v.right_tabs.widget(0)
    found = clipped_widgets(scroll)
    if scroll.horizontalScrollBar().maximum() > 0:
        found.append(f"the panel scrolls sideways by {scroll.horizontalScrollBar().maximum()} px")
    chart = v.predictions
    for axis in ("left", "bottom"):  # the chart's names and its axis's words, whole in it
        item = chart.getAxis(axis)
        texts = [item.label] if axis == "bottom" else []
        for text in texts:
            rect = chart.mapFromScene(text.mapRectToScene(text.boundingRect())).boundingRect()
            if rect.left() < 0 or rect.right() > chart.viewport().width():  # cut sideways
                found.append(f"the predictions' {axis} label is cut: {rect}")
        if axis == "left":
            from ui_fit import axis_labels

            for name, rect in axis_labels(item, chart):
                if not chart.viewport().rect().toRectF().contains(rect):
                    found.append(f"the predictions' name {name!r} is cut: {rect}")
    c = v.controls
    for label in (c.query_label, c.class_label, v.predictions_title):
        if label.height() < label.heightForWidth(label.width()):
            found.append(f"{label.text()!r} is cut: {label.height()} px of its height")
    return found


def test_the_side_panel_is_whole_at_1280x720_across_kinds(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    window.resize(1280, 720)
    v = window.viewer
    drop(window, [photo_files["chelsea"], checkpoints["shipped"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    v.controls.select_method("gradcam")  # a CAM: its target layer shows beside the method
    for name in ("swin", "clip", "shipped"):
        open_model(qtbot, window, checkpoints[name])
        if v.prompt_box.isVisible():
            window.apply_prompts(("a photo of a dog", "a photo of a cat on a sofa", "a red car"))
            qtbot.waitUntil(lambda: bool(v.prompt_box.applied) and settled(window), timeout=WAIT_MS)
        qtbot.wait(50)  # the panel laid out for what it shows now
        assert side_panel_problems(window) == [], name


def test_head_importance_is_greyed_on_a_model_without_classes(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    messages: list[str] = []
    window.notifier.userMessage.connect(messages.append)
    knockout = window.knockout
    drop(window, [photo_files["chelsea"], checkpoints["shipped"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    knockout.act_importance.setChecked(True)
    qtbot.waitUntil(lambda: knockout.effect is not None, timeout=WAIT_MS)
    open_model(qtbot, window, checkpoints["backbone"])
    assert window.viewer.image.class_names == []
    qtbot.wait(200)  # an importance asked of this model would have been refused by now
    assert messages == []
    for action in (knockout.act_importance, knockout.act_patch):
        assert not action.isEnabled()
        assert "this model has none" in action.toolTip()
    assert knockout.effect is None and not knockout.scale.isVisible()
    open_model(qtbot, window, checkpoints["shipped"])  # the choice comes back with classes
    assert knockout.act_importance.isEnabled() and knockout.act_patch.isEnabled()
    qtbot.waitUntil(lambda: knockout.effect is not None, timeout=WAIT_MS)
    assert knockout.effect.shape == (window.viewer.image.num_layers, window.viewer.image.num_heads)
    assert messages == []


def test_compare_window_greys_what_model_a_cannot_run(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    from PySide6.QtGui import QStandardItemModel

    v = window.viewer
    drop(window, [photo_files["chelsea"], checkpoints["shipped"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    v.controls.select_method("relevance")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    window.compare_with(checkpoints["small"])
    qtbot.waitUntil(lambda: window.compare is not None and window.compare.result is not None)
    c = window.compare
    assert c.method.currentData() == "relevance"
    open_model(qtbot, window, checkpoints["swin"])
    why = v.image.unavailable["relevance"]
    qtbot.waitUntil(lambda: c.result is not None and c.result.name_a == "swin.pth", timeout=WAIT_MS)
    assert c.method.currentData() != "relevance"
    assert c.method.currentData() not in v.image.unavailable
    model = c.method.model()
    assert isinstance(model, QStandardItemModel)
    item = model.item(c.method.findData("relevance"))
    assert not item.isEnabled() and item.toolTip() == f"Model A: {why}"
    assert why not in c.status.text()  # never run on A and refused
    open_model(qtbot, window, checkpoints["shipped"])
    qtbot.waitUntil(lambda: c.method.currentData() == "relevance", timeout=WAIT_MS)
    assert model.item(c.method.findData("relevance")).isEnabled()


def test_a_cam_target_layer_beyond_the_new_model_is_its_last_block(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    v = window.viewer
    c = v.controls
    drop(window, [photo_files["chelsea"], checkpoints["shipped"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    assert v.image.cam_blocks == 4 and v.image.cam_auto == "3.norm1"  # pre-norm blocks
    c.select_method("gradcam")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "gradcam", timeout=WAIT_MS)
    assert c.cam_layer.currentText() == "auto (3.norm1)"  # the layer auto reads (DESIGN §5)
    assert "target layer auto (3.norm1)" in v.map_view.full_title
    c.cam_layer._take("3.norm2")  # as typed in the picker and confirmed
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    assert dict(v.maps.params.values)["layer"] == "3.norm2"
    open_model(qtbot, window, checkpoints["clip"])
    window.apply_prompts(("a photo of a dog", "a red car"))
    qtbot.waitUntil(lambda: bool(v.prompt_box.applied) and settled(window), timeout=WAIT_MS)
    assert v.image.cam_blocks == 2 and c.method_name() == "gradcam"
    assert dict(v.maps.params.values)["layer"] == "1.norm2"
    assert c.cam_layer.currentText() == "1.norm2"
    assert "out of range" not in v.map_view.notice_text()
    assert "target layer 1.norm2" in v.map_view.full_title
    open_model(qtbot, window, checkpoints["shipped"])
    assert dict(v.maps.params.values)["layer"] == "3.norm2"
    assert c.cam_layer.currentText() == "3.norm2"


def test_faithfulness_is_greyed_on_a_model_without_classes(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    messages: list[str] = []
    window.notifier.userMessage.connect(messages.append)
    panel = window.viewer.faithfulness
    drop(window, [photo_files["chelsea"], checkpoints["backbone"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    for button in (panel.measure, panel.over_folder):
        assert not button.isEnabled()
        assert "this model has none" in button.toolTip()
    panel.measure.click()  # a greyed button: nothing is asked, nothing refused
    qtbot.wait(200)
    assert messages == [] and panel.result is None
    open_model(qtbot, window, checkpoints["shipped"])
    assert panel.measure.isEnabled() and panel.over_folder.isEnabled()
    panel.measure.click()
    qtbot.waitUntil(lambda: panel.result is not None, timeout=WAIT_MS)
    assert messages == []


def test_a_folders_faithfulness_curves_go_with_their_model(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files, tmp_path: Path
) -> None:
    from test_ui_folder_stats import image_folder

    panel = window.viewer.faithfulness
    drop(window, [photo_files["chelsea"], checkpoints["shipped"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    runs = window.folder_faithfulness
    runs.steps = 2
    with qtbot.waitSignal(runs.runner.finished, timeout=WAIT_MS):
        assert runs.start(image_folder(tmp_path / "imgs", 2))
    assert panel.folder_result is not None and not panel.back.isHidden()
    open_model(qtbot, window, checkpoints["small"])
    assert panel.folder_result is None and panel.back.isHidden()
    assert "Mean over" not in panel.status.text()
    assert panel.deletion.curves == {}  # no curve of the last model's folder


def test_a_refusal_about_the_last_model_goes_when_another_opens(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files, tmp_path: Path
) -> None:
    bar = window.message_bar
    drop(window, [photo_files["chelsea"], checkpoints["shipped"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    window.apply_prompts(("a photo of a cat",))  # the shipped model's classes are its head's
    qtbot.waitUntil(lambda: bar.text().startswith("Prompts not applied"), timeout=WAIT_MS)
    open_model(qtbot, window, checkpoints["small"])
    assert bar.text() == ""
    missing = tmp_path / "gone.png"
    drop(window, [missing, checkpoints["shipped"]])  # said with the drop, before the model
    qtbot.waitUntil(
        lambda: window.model.name == checkpoints["shipped"].name and settled(window),
        timeout=WAIT_MS,
    )
    assert "gone.png: no such file" in bar.text()


def test_words_about_the_last_model_go_with_it(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    """Model ▸ Settings… on the shipped model ("every setting came from the file") and its
    logit lens in the Features tab; then a backbone without a classifier: the message about
    the shipped model is gone, and the lens chart keeps none of its block numbers and says
    why it is empty, and "Top prediction" is greyed with its reason."""
    bar, f = window.message_bar, window.features
    drop(window, [photo_files["chelsea"], checkpoints["shipped"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    window.confirm_model_settings()
    assert bar.text().startswith(checkpoints["shipped"].name)
    reset = window.viewer.controls.class_reset
    assert reset.isEnabled()
    window.tabs.setCurrentWidget(f)
    qtbot.waitUntil(lambda: f.result is not None and not window.client.is_busy(), timeout=WAIT_MS)
    lens = f.logit_lens
    blocks = window.viewer.image.num_layers
    assert lens.getAxis("bottom")._tickLevels[0] == [(i, str(i)) for i in range(blocks)]
    assert lens.getPlotItem().listDataItems() and lens.note() == ""

    open_model(qtbot, window, checkpoints["backbone"])
    assert bar.text() == ""
    qtbot.waitUntil(
        lambda: f.result is not None and f.result.logit_lens is None
        and not window.client.is_busy(),
        timeout=WAIT_MS,
    )  # fmt: skip
    assert not lens.getPlotItem().listDataItems()
    assert lens.getAxis("bottom")._tickLevels[0] == []
    assert lens.note() == NO_LENS
    assert not reset.isEnabled() and reset.toolTip() == NO_CLASS_TO_EXPLAIN  # no class to go to
