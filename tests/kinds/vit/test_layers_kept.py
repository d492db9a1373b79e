"""Fewer layers kept: ``analyze(..., layers=...)`` and ``vitviz-cli explain --layers`` keep only
the chosen layers' attention (and gradients) with the forward pass unchanged; the maps that need
every layer refuse, the memory plan counts the kept layers and names the choice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CLASS_NAMES, random_vit

from vitviz.checkpoints import LoadedModel, load_checkpoint, save_checkpoint
from vitviz.cli import main
from vitviz.core.layers import LayersNotKeptError, LayerSpecError, layers_text, parse_layers
from vitviz.explain.methods import get_method, methods_for
from vitviz.kinds.vit.batch import analyze_batch
from vitviz.kinds.vit.memory import check_analysis_memory, estimate_analysis
from vitviz.pipeline.analysis import NotEnoughMemoryError, analyze
from vitviz.pipeline.export import compute_maps, write_npz, write_pngs
from vitviz.pipeline.memory import BUDGET_ENV, USABLE_FRACTION

DEPTH = 6
KEPT = (1, 4, 5)


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    model = random_vit(depth=DEPTH, heads=2, patch_size=4)  # 32 px: 65 tokens
    return save_checkpoint(model, tmp_path / "six.safetensors", class_names=CLASS_NAMES)


@pytest.fixture
def loaded(ckpt: Path) -> LoadedModel:
    return load_checkpoint(ckpt)


def _image(seed: int = 0) -> torch.Tensor:
    return torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(seed))


# -- the spec ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "kept"),
    [
        ("9,10,11", (9, 10, 11)),
        ("last:4", (8, 9, 10, 11)),
        (" 0-2 , 11 ", (0, 1, 2, 11)),
        ("11,3,3", (3, 11)),
        ("-1", (11,)),
        ([-2, 0], (0, 10)),
        ((np.int64(5),), (5,)),
        ("all", None),
        ("last:12", None),
        (list(range(12)), None),
        (None, None),
    ],
)
def test_layer_specs(spec: object, kept: tuple[int, ...] | None) -> None:
    assert parse_layers(spec, 12) == kept  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("12", "layer 12 is out of range: the model has 12 layers (0..11)"),
        ("3-12", "layer 12 is out of range"),
        ("-13", "layer -13 is out of range"),
        ("last:0", "last:K needs a whole number K of at least 1"),
        ("last:13", "more layers than the model's 12"),
        ("5-2", "the range 5-2 runs backwards"),
        ("nine", "'nine' is not a layer; expected indices and ranges"),
        ("1,,2", "'' is not a layer"),
        ([], "choose at least one layer"),
        ([1.5], "1.5 is not a layer index"),
        ([True], "True is not a layer index"),
    ],
)
def test_bad_layer_specs_are_refused_in_one_line(spec: object, words: str) -> None:
    with pytest.raises(LayerSpecError) as info:
        parse_layers(spec, 12)  # type: ignore[arg-type]
    assert words in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_layers_text_joins_runs() -> None:
    assert layers_text((0, 1, 2, 3, 7, 9, 10)) == "0-3, 7, 9-10"


# -- the analysis ------------------------------------------------------------------------------


@pytest.mark.parametrize("gradients", [False, True], ids=["attention", "gradients"])
def test_kept_layers_equal_the_full_analysis_and_the_logits_are_identical(
    loaded: LoadedModel, gradients: bool
) -> None:
    full = analyze(loaded, _image(), gradients=gradients)
    part = analyze(loaded, _image(), gradients=gradients, layers=list(KEPT))
    assert torch.equal(part.logits, full.logits)
    rows = list(KEPT)
    assert part.layer_indices == KEPT and part.num_layers == len(KEPT)
    assert part.model_layers == DEPTH and not part.all_layers_kept
    assert full.layer_indices == tuple(range(DEPTH)) and full.all_layers_kept
    assert torch.equal(part.attention, full.attention[rows])
    for name in ("mean_distance", "entropy", "prefix_share", "token_norms"):
        assert torch.equal(getattr(part, name), getattr(full, name)[rows]), name
    assert torch.equal(part.all_attention_maps(), full.all_attention_maps()[rows])
    if gradients:  # the products of the pass itself: the kept layers' rows
        got, want = part.gradient_products(), full.gradient_products()
        assert got.layers == KEPT and want.layers is None
        torch.testing.assert_close(got.weighted, want.weighted[rows], rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(got.positive, want.positive[rows], rtol=1e-5, atol=1e-7)
        assert got.last is not None and want.last is not None
        torch.testing.assert_close(got.last, want.last, rtol=1e-5, atol=1e-7)


def test_half_precision_and_a_batch_keep_the_same_layers(loaded: LoadedModel) -> None:
    full = analyze(loaded, _image(), attention_dtype=torch.float16)
    part = analyze(loaded, _image(), attention_dtype=torch.float16, layers="last:2")
    assert part.attention.dtype == torch.float16
    assert torch.equal(part.attention, full.attention[-2:])
    images = [_image(0), _image(1)]
    batch = analyze_batch(loaded, images, batch_size=2, gradients=True, layers="last:2")
    gradcam = get_method("attention-gradcam")
    for i, a in enumerate(batch):
        alone = analyze(loaded, _image(i), gradients=True, layers="last:2")
        assert a.layer_indices == (4, 5)
        torch.testing.assert_close(a.attention, alone.attention, atol=1e-5, rtol=0)
        torch.testing.assert_close(a.logits, alone.logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(gradcam(a), gradcam(alone), atol=1e-5, rtol=1e-4)


def test_a_bad_layer_choice_is_refused_before_anything_runs(loaded: LoadedModel) -> None:
    with pytest.raises(LayerSpecError, match=r"layer 6 is out of range: the model has 6 layers"):
        analyze(loaded, _image(), layers=[2, 6])
    with pytest.raises(LayerSpecError, match="last:K"):
        analyze_batch(loaded, [_image()], layers="last:x")


EVERY_LAYER = ("rollout", "gradient-rollout", "relevance", "transformer-attribution", "grad-sam")


def test_maps_that_need_every_layer_refuse_naming_the_missing_ones(loaded: LoadedModel) -> None:
    part = analyze(loaded, _image(), layers=list(KEPT))
    usable = methods_for(part)
    for name in EVERY_LAYER:
        method = get_method(name)
        reason = method.unavailable(part)
        assert reason is not None and "missing 0, 2-3" in reason, name
        assert "layers 1, 4-5 of 6" in reason and method not in usable
        with pytest.raises(ValueError) as info:
            method(part)
        assert str(info.value) == reason
    for call in ("rollout", "gradient_rollout", "relevance"):  # the Analysis's own methods
        with pytest.raises(LayersNotKeptError) as info:
            getattr(part, call)()
        msg = str(info.value)
        assert "needs every layer's attention" in msg and "missing 0, 2-3" in msg
        assert "\n" not in msg


def test_maps_of_one_layer_take_the_model_layer_index(loaded: LoadedModel) -> None:
    full = analyze(loaded, _image())
    part = analyze(loaded, _image(), layers=list(KEPT))
    attention = get_method("attention")
    for layer in KEPT:
        for head in (-1, 1):
            got = attention(part, (2, 3), None, {"layer": layer, "head": head})
            assert torch.equal(got, attention(full, (2, 3), None, {"layer": layer, "head": head}))
        assert torch.equal(part.dino_masks(layer), full.dino_masks(layer))
    assert torch.equal(attention(part), attention(full))  # -1: the last kept, here the model's
    early = analyze(loaded, _image(), layers=[0, 2])
    assert torch.equal(early.attention_maps(-1), full.attention_maps(2))  # -1: the last kept
    with pytest.raises(LayersNotKeptError, match=r"layer 3 was not kept: .* layers 0, 2 of 6"):
        attention(early, None, None, {"layer": 3})
    # other negative layers count from the model's end: -2 is layer 4, kept in ``part``
    assert torch.equal(part.attention_maps(-2), full.attention_maps(DEPTH - 2))
    with pytest.raises(LayersNotKeptError, match="layer 3 was not kept"):
        part.attention_maps(-3)


def test_grad_cam_on_attention_needs_the_last_layer(loaded: LoadedModel) -> None:
    method = get_method("attention-gradcam")
    full = analyze(loaded, _image())
    last = analyze(loaded, _image(), layers=[0, 5])
    torch.testing.assert_close(method(last), method(full), atol=1e-6, rtol=1e-5)
    early = analyze(loaded, _image(), layers=[0, 1])
    reason = method.unavailable(early)
    assert reason is not None and "needs the last layer (5)" in reason
    assert early.gradients(2)[0].shape == (1, 2, 65, 65) and len(early.gradients(2)) == 2
    torch.testing.assert_close(early.gradients(2)[1], full.gradients(2)[1])


def test_the_npz_says_which_layers_it_holds(tmp_path: Path, loaded: LoadedModel) -> None:
    full = analyze(loaded, _image(), gradients=True)
    part = analyze(loaded, _image(), gradients=True, layers=list(KEPT))
    maps = compute_maps(part)
    with np.load(write_npz(part, maps, tmp_path / "part.npz")) as z:
        assert z["layers"].dtype == np.int64 and z["layers"].tolist() == list(KEPT)
        np.testing.assert_array_equal(z["attention"], full.attention_numpy()[list(KEPT)])
        np.testing.assert_array_equal(z["mean_distance"], full.mean_distance.numpy()[list(KEPT)])
        np.testing.assert_array_equal(z["entropy"], full.entropy.numpy()[list(KEPT)])
        for key in ("rollout", "gradient_rollout", "relevance"):
            assert np.isnan(z[key]).all(), key
        np.testing.assert_array_equal(z["logits"], full.logits.numpy())
    with np.load(write_npz(full, compute_maps(full), tmp_path / "full.npz")) as z:
        assert z["layers"].tolist() == list(range(DEPTH))
        assert not np.isnan(z["rollout"]).any()
    written = write_pngs(part, maps, tmp_path / "png", "part")
    assert [p.name for p in written] == ["part_heads.png"]


# -- memory -------------------------------------------------------------------------------------


def _config(depth: int = 12, heads: int = 6):
    from vitviz.blocks import ViTConfig

    return ViTConfig(image_size=224, patch_size=16, dim=384, depth=depth, heads=heads)


@pytest.mark.parametrize("gradients", [False, True])
def test_the_estimate_counts_the_kept_layers(gradients: bool) -> None:
    size = (448, 448)  # 785 tokens: attention is most of it
    full = estimate_analysis(_config(), size, gradients=gradients)
    assert full.layers_kept is None
    needed = [estimate_analysis(_config(), size, gradients=gradients, layers=k) for k in (3, 6)]
    for k, est in zip((3, 6), needed, strict=True):
        assert est.layers == 12 and est.layers_kept == k
        assert est.attention * 12 == full.attention * k  # exactly the kept layers' attention
        dropped = (12 - k) * 6 * 785 * 785 * 4  # the attention of the layers not kept
        assert full.needed - est.needed >= dropped
        assert est.needed > k / 12 * full.needed * 0.9  # what stays is still counted
    assert needed[0].needed < needed[1].needed < full.needed
    assert estimate_analysis(_config(), size, gradients=gradients, layers=12) == full


def _budget_for(loaded: LoadedModel, k: int, gradients: bool = False) -> int:
    """A budget in which k layers' analysis fits but k + 1 layers' does not."""
    cfg = loaded.model.config
    fits = estimate_analysis(cfg, (32, 32), gradients=gradients, layers=k).needed
    over = estimate_analysis(cfg, (32, 32), gradients=gradients, layers=k + 1).needed
    assert fits < over
    return int((fits + over) / 2 / USABLE_FRACTION)


def test_a_small_budget_refuses_and_names_how_many_layers_fit(
    loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = analyze(loaded, _image())
    monkeypatch.setenv(BUDGET_ENV, str(_budget_for(loaded, 3)))
    with pytest.raises(NotEnoughMemoryError) as info:
        analyze(loaded, _image())
    msg = str(info.value)
    assert "\n" not in msg and "over 6 layers" in msg
    assert "fewer layers kept: 3 of the 6 layers fit (--layers last:3" in msg, msg
    assert 'analyze(..., layers="last:3")' in msg
    assert "half precision" in msg  # the other choice is still named
    part = analyze(loaded, _image(), layers="last:3")  # the suggestion runs
    assert torch.equal(part.attention, full.attention[3:])
    assert torch.equal(part.logits, full.logits)
    with pytest.raises(NotEnoughMemoryError) as info:
        analyze(loaded, _image(), layers="last:4")
    assert "over 4 of 6 layers kept" in str(info.value)
    assert "3 of the 6 layers fit" in str(info.value)


def test_no_layer_choice_is_offered_when_not_even_one_fits(
    loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BUDGET_ENV, "1K")
    with pytest.raises(NotEnoughMemoryError) as info:
        analyze(loaded, _image())
    assert "fewer layers kept" not in str(info.value)


# -- the command line ---------------------------------------------------------------------------


def _explain(ckpt: Path, out: Path, image: Path, *extra: str) -> int:
    return main(["explain", str(image), "--checkpoint", str(ckpt), "--device", "cpu",
                 "--out", str(out), *extra])  # fmt: skip


@pytest.fixture
def image(tmp_path: Path) -> Path:
    from checkpoint_cases import photo

    return photo(tmp_path, size=(32, 32))


def test_explain_keeps_the_layers_asked_for(
    tmp_path: Path,
    ckpt: Path,
    loaded: LoadedModel,
    image: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    out = tmp_path / "out"
    assert _explain(ckpt, out, image, "--layers", "1,4,5", "--method", "attention") == 0
    err = capsys.readouterr().err
    assert "keeping the attention of layers 1, 4-5 of 6" in err
    assert "rollout, gradient-rollout, relevance" in err
    want = analyze(loaded, image, layers=list(KEPT))
    with np.load(out / "photo.npz") as z:
        assert z["layers"].tolist() == list(KEPT)
        np.testing.assert_allclose(z["attention"], want.attention_numpy(), atol=1e-6)
        np.testing.assert_allclose(z["logits"], want.logits.numpy(), atol=1e-5)
        assert np.isnan(z["rollout"]).all() and np.isnan(z["relevance"]).all()
        np.testing.assert_allclose(
            z["map_attention"], get_method("attention")(want).numpy(), atol=1e-6
        )
    assert sorted(p.name for p in out.glob("*.png")) == ["photo_attention.png", "photo_heads.png"]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--layers", "6"], "--layers 6: layer 6 is out of range: the model has 6 layers (0..5)"),
        (["--layers", "2,x"], "--layers 2,x: 'x' is not a layer"),
        (["--layers", "last:0"], "--layers last:0: last:K needs a whole number"),
        (["--layers", "last:2", "--method", "rollout"], "--method rollout: Attention rollout "
         "needs every layer, but only layers 4-5 of 6 were kept (missing 0-3)"),
        (["--layers", "1,4", "--method", "attention", "--param", "attention.layer=2"],
         "--param attention.layer=2: layer 2 is not kept (--layers keeps 1, 4"),
    ],
)  # fmt: skip
def test_explain_refuses_bad_layer_choices_in_one_line(
    tmp_path: Path,
    ckpt: Path,
    image: Path,
    capsys: pytest.CaptureFixture,
    extra: list[str],
    words: str,
) -> None:
    out = tmp_path / "out"
    assert _explain(ckpt, out, image, *extra) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines
    assert not out.exists() or not list(out.iterdir())


def test_explain_over_the_budget_names_the_layers_choice_that_then_runs(
    tmp_path: Path,
    ckpt: Path,
    loaded: LoadedModel,
    image: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(BUDGET_ENV, str(_budget_for(loaded, 2, gradients=True)))
    assert _explain(ckpt, tmp_path / "refused", image) == 2  # the one image did not fit
    said = capsys.readouterr().err
    assert "--layers last:2" in said and "2 of the 6 layers fit" in said, said
    out = tmp_path / "out"
    assert _explain(ckpt, out, image, "--layers", "last:2") == 0
    with np.load(out / "photo.npz") as z:
        assert z["layers"].tolist() == [4, 5] and z["attention"].shape[0] == 2


@pytest.mark.parametrize("gradients", [False, True], ids=["attention", "gradients"])
def test_a_model_from_code_keeps_the_chosen_layers_too(
    tmp_path: Path, gradients: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BUDGET_ENV, "1T")  # the plans below are compared, not refused
    from test_modelcode_layouts import LAYOUT_IDS, LAYOUTS, sample_input, write_model

    from vitviz.modelcode import load_model_code, make_spec

    written = write_model(LAYOUTS[LAYOUT_IDS.index("fused_qkv")], tmp_path)  # 3 layers
    lay = written.layout
    code = load_model_code(make_spec(written.file, lay.name, lay.args, written.weights))
    x = sample_input()[0]
    full = analyze(code, x, gradients=gradients)
    part = analyze(code, x, gradients=gradients, layers=[0, 2])
    assert torch.equal(part.logits, full.logits)
    assert torch.equal(part.attention, full.attention[[0, 2]])
    assert part.layer_indices == (0, 2) and part.model_layers == lay.depth
    method = get_method("attention-gradcam")  # the last layer is kept: its gradient is there
    torch.testing.assert_close(method(part), method(full), atol=1e-6, rtol=1e-5)
    assert get_method("relevance").unavailable(part) is not None
    # its forward pass lists every layer's attention: the plan keeps that peak, while vitviz's
    # own ViT (which hands each layer over as it comes) drops the layers not kept
    whole = check_analysis_memory(code.model, (256, 256), gradients=gradients)
    one = check_analysis_memory(code.model, (256, 256), gradients=gradients, layers=1)
    assert one.forward_peak == whole.forward_peak and one.kept < whole.kept
    own = random_vit(depth=lay.depth, heads=lay.heads)  # patch 8, as the model from code
    whole = check_analysis_memory(own, (256, 256), gradients=gradients)
    one = check_analysis_memory(own, (256, 256), gradients=gradients, layers=1)
    assert one.forward_peak < whole.forward_peak


def test_explain_refuses_layers_on_a_swin(
    tmp_path: Path, image: Path, capsys: pytest.CaptureFixture
) -> None:
    from swin_helpers import tiny_torchvision_swin

    swin = tmp_path / "swin_t_tiny.pth"
    torch.save(tiny_torchvision_swin().state_dict(), swin)
    assert _explain(swin, tmp_path / "out", image, "--layers", "last:1") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "vitviz-cli: --layers applies to ViT models; a Swin's analysis keeps every block"
    ]
