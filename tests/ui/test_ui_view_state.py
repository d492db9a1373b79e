"""The window's state is a function of the model it shows (DESIGN §6, vitviz.ui.view_state).

Six kinds made in the test with random weights (a ViT, a Swin, a PVT v2, a CaiT, a CLIP with
typed prompts, a ViT without a classifier) are opened in one window. ``derive`` is checked for
every ordered pair of kinds with every method selected on the first; then the window itself
walks every ordered pair (a closed walk over all 30), a different method selected before each
switch, and what it shows is checked: the method shown runs on the model (the chosen one comes
back where it can, else the reason is in the view, in full), the title names only the model's
classes, the predictions' words are this model's, every statistics plot has points or says
why inside it on a range of its own."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
import timm
import torch
from clip_fixtures import CORPUS, learn_bpe, save_openai_files, tiny_clip
from conftest import CLASS_NAMES, random_vit
from pyramid_helpers import save_bare, tiny_timm_pvt
from swin_helpers import tiny_torchvision_swin
from test_ui_window import WAIT_MS, drop, settled, wait_shown
from window_watch import watched_window
from zoo_helpers import randomize_

from vitviz.checkpoints import save_checkpoint
from vitviz.ui.main_window import MainWindow
from vitviz.ui.view_state import STAT_KEYS, Choices, derive
from vitviz.workers.messages import ImageResult, MethodInfo

KINDS = ("vit", "swin", "pyramid", "cait", "clip", "noclass")
PROMPTS = ("a photo of a dog", "a photo of a cat on a sofa", "a red car")
CLIP_SIDE = 32


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("kinds")
    vit = random_vit(image_size=32, patch_size=8, depth=2, heads=2)
    noclass = random_vit(image_size=32, patch_size=8, depth=2, heads=2, num_classes=0, seed=3)
    swin = folder / "swin.pth"
    torch.save(tiny_torchvision_swin().state_dict(), swin)
    swin.with_name(swin.name + ".vitviz.json").write_text(
        json.dumps({"preprocessing": {"image_size": [64, 64]}})
    )
    torch.manual_seed(0)
    cait = timm.create_model(
        "cait_xxs24_224",
        pretrained=False,
        num_classes=5,
        img_size=32,
        patch_size=8,
        embed_dim=32,
        depth=2,
        depth_token_only=1,
        num_heads=4,
    )
    cait_path = folder / "cait.pth"
    torch.save(randomize_(cait).state_dict(), cait_path)
    return {
        "vit": save_checkpoint(vit, folder / "vit.safetensors", class_names=CLASS_NAMES),
        "swin": swin,
        "pyramid": save_bare(tiny_timm_pvt(), folder / "pvt.pth"),
        "cait": cait_path,
        "clip": _clip_folder(folder / "tiny-clip"),
        "noclass": save_checkpoint(noclass, folder / "noclass.safetensors"),
    }


def _clip_folder(folder: Path) -> Path:
    from transformers import CLIPImageProcessor

    vocab, merges = learn_bpe(CORPUS, merges=150)
    model = tiny_clip(len(vocab), seed=4)
    with torch.no_grad():
        model.logit_scale.fill_(2.3)
    model.save_pretrained(folder)
    save_openai_files(folder, vocab, merges)
    CLIPImageProcessor(size={"shortest_edge": CLIP_SIDE}, crop_size=CLIP_SIDE).save_pretrained(
        folder
    )
    return folder


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)
    shutil.rmtree(tmp_path, ignore_errors=True)


def open_kind(qtbot, window: MainWindow, path: Path) -> None:
    """Open a checkpoint on the image shown and wait for its maps."""
    drop(window, [path])
    qtbot.waitUntil(
        lambda: window.model is not None and window.model.path == path and settled(window),
        timeout=WAIT_MS,
    )
    if window.model.takes_prompts and not window.model.prompts:
        window.apply_prompts(PROMPTS)
        qtbot.waitUntil(
            lambda: window.model.prompts == PROMPTS and settled(window), timeout=WAIT_MS
        )
    qtbot.waitUntil(lambda: settled(window) and window.viewer.image.class_names is not None)


def closed_walk(nodes: tuple[str, ...]) -> list[str]:
    """A walk through every ordered pair of ``nodes`` once (an Euler circuit of the complete
    directed graph, by Hierholzer's algorithm), starting and ending at the first node."""
    left = {a: [b for b in reversed(nodes) if b != a] for a in nodes}
    stack, walk = [nodes[0]], []
    while stack:
        if left[stack[-1]]:
            stack.append(left[stack[-1]].pop())
        else:
            walk.append(stack.pop())
    return walk[::-1]


def test_closed_walk_takes_every_ordered_pair_once() -> None:
    walk = closed_walk(KINDS)
    pairs = list(itertools.pairwise(walk))
    assert sorted(pairs) == sorted((a, b) for a in KINDS for b in KINDS if a != b)


def check_derived(
    before: ImageResult, after: ImageResult, methods: list[MethodInfo], clip: bool
) -> None:
    """``derive`` after a switch from ``before`` to ``after`` with each method chosen and the
    last class of ``before`` explained."""
    last = len(before.class_names) - 1
    for m in methods:
        for target in (None, last if last >= 0 else None):
            state = derive(after, methods, Choices(m.name, target), clip, PROMPTS if clip else ())
            assert state.method not in after.unavailable, (m.name, state)
            if m.name in after.unavailable:
                assert state.method_note is not None
                assert after.unavailable[m.name].rstrip(".") in state.method_note
            else:
                assert state.method == m.name and state.method_note is None
            c = state.shown_class
            assert c is None or 0 <= c < len(after.class_names)
            assert (c is None) == (not after.class_names)
            assert ("prompt" in state.predictions_title) == clip
            assert ("prompt" in state.predictions_axis) == ("prompt" in after.words.probability)
            for key, values in _stat_values(after).items():
                has_points = np.isfinite(values).any()
                assert (state.stats_notes[key] is None) == has_points, (key, state.stats_notes)


def _stat_values(image: ImageResult) -> dict[str, np.ndarray]:
    values = (image.mean_distance, image.entropy, image.prefix_share, image.token_norms)
    return dict(zip(STAT_KEYS, values, strict=True))


def check_window(window: MainWindow, wanted: str) -> None:
    """What the window shows after a switch, ``wanted`` chosen before it."""
    v = window.viewer
    image = v.image
    shown = v.controls.method_name()
    assert shown not in image.unavailable
    assert v.maps.params.method == shown
    label = v.map_view.notice
    notice = "" if label.isHidden() else label.text()
    if wanted in image.unavailable:
        assert shown != wanted
        assert "shown instead" in notice, notice  # short, the map in sight; in full:
        assert image.unavailable[wanted].rstrip(".") in label.toolTip(), label.toolTip()
    else:
        assert shown == wanted  # the user's choice comes back
    title = v.map_view.full_title
    assert '"-1"' not in title and "“-1”" not in title
    if "class “" in title:
        assert any(f"class “{name}”" in title for name in image.class_names), title
    clip = window.model.takes_prompts
    axis = v.predictions.getAxis("bottom").labelText
    assert ("prompt" in axis) == ("prompt" in image.words.probability), axis
    assert ("prompt" in v.predictions_title.text()) == clip
    assert (v.predictions.labels == []) == (not image.class_names)
    stats = v.stats
    for key, values in _stat_values(image).items():
        plot = stats.plots[key]
        items = plot.getPlotItem().items
        dots = [i for i in items if isinstance(i, pg.ScatterPlotItem) and len(i.data)]
        texts = [i for i in items if isinstance(i, pg.TextItem)]
        if np.isfinite(values).any():
            assert dots and not texts, key
        else:
            assert not dots and len(texts) == 1 and texts[0].toPlainText(), key
            assert plot.getPlotItem().vb.viewRange()[1] == pytest.approx([0.0, 1.0]), key


def test_every_switch_with_every_method(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    v = window.viewer
    image = photo_files["chelsea"]
    drop(window, [image, checkpoints["vit"]])
    wait_shown(qtbot, window, image.name)
    methods = list(v.controls.methods.values())
    assert len(methods) >= 10
    offers: dict[str, ImageResult] = {}
    for kind in KINDS:
        open_kind(qtbot, window, checkpoints[kind])
        offers[kind] = v.image
    assert offers["swin"].num_prefix_tokens == 0 and not offers["noclass"].class_names
    assert "transformer-attribution" in offers["swin"].unavailable
    for a in KINDS:
        for b in KINDS:
            check_derived(offers[a], offers[b], methods, b == "clip")

    walk = closed_walk(KINDS[-1:] + KINDS[:-1])  # from the model open now
    names = [m.name for m in methods]
    for step, (a, b) in enumerate(itertools.pairwise(walk)):
        assert window.model.path == checkpoints[a]
        pick = names[step % len(names)]
        if pick not in v.image.unavailable:  # the list lets the user pick it on this model
            v.controls.select_method(pick)
        wanted = v.controls.wanted_method  # else the last choice stays chosen
        last = len(v.image.class_names) - 1
        if last > 0:
            v.set_target_class(last)
        qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
        open_kind(qtbot, window, checkpoints[b])
        check_window(window, wanted)
    # a method shown in place of the chosen one: the choice is what the settings keep
    v.controls.select_method("transformer-attribution")
    open_kind(qtbot, window, checkpoints["swin"])
    assert v.controls.method_name() != "transformer-attribution"
    v.save_settings(window.settings)
    assert window.settings.get("view/method") == "transformer-attribution"
