"""transformers' MobileViT folders open as the MobileViT kind, exactly: logits 1e-4 relative
and every layer's attention 1e-5 against transformers' own model with perturbed weights and
BatchNorm statistics, given the channel order its image processor feeds (BGR: vitviz reverses
its stem's input channels); the classifier and the base model; the library check ran."""

from __future__ import annotations

import json

import pytest
import torch
from mobilevit_helpers import SIZE, hf_attention, tiny_hf_mobilevit

from vitviz.checkpoints import load_checkpoint
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.probe_sizes import analysed_sizes, probe_sizes, size_words
from vitviz.checkpoints.sidecar import sidecar_path
from vitviz.kinds.mobilevit.network import MobileViTNet

pytest.importorskip("transformers")


def _exact(ours, theirs, x_theirs, x_ours) -> None:
    want, attn = hf_attention(theirs, x_theirs)
    with torch.no_grad():
        out = ours.forward_explained(x_ours)
    rel = float((out.logits - want).abs().max() / want.abs().max())
    assert rel < 1e-4, rel
    assert len(out.attentions) == len(attn) == 9
    for a, b in zip(out.attentions, attn, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("base", [False, True])
def test_a_transformers_folder_is_transformers_model_on_bgr(tmp_path, base) -> None:
    model = tiny_hf_mobilevit(seed=5, base=base)
    model.save_pretrained(tmp_path / "hf")
    loaded = load_checkpoint(tmp_path / "hf")
    assert isinstance(loaded.model, MobileViTNet)
    assert any("checked against transformers" in n for n in loaded.notes)
    assert any("BGR" in n for n in loaded.notes)
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    _exact(loaded.model, model, x.flip(1), x)
    assert (loaded.model.config.num_classes == 0) == base


def test_a_processor_that_keeps_rgb_is_read_as_it(tmp_path) -> None:
    model = tiny_hf_mobilevit(seed=6)
    model.save_pretrained(tmp_path / "hf")
    proc = {
        "do_flip_channel_order": False,
        "do_resize": True,
        "size": {"shortest_edge": 72},
        "do_center_crop": True,
        "crop_size": {"height": 64, "width": 64},
        "resample": 3,
    }
    (tmp_path / "hf" / "preprocessor_config.json").write_text(json.dumps(proc))
    loaded = load_checkpoint(tmp_path / "hf")
    assert not any("BGR" in n for n in loaded.notes)
    assert loaded.preprocessing.image_size == (64, 64)
    x = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    _exact(loaded.model, model, x, x)


@pytest.mark.parametrize("preprocessing", [{"image_size": [48, 48]}, {"resize": "fit"}])
def test_the_sizes_analysed_are_checked_against_transformers_there(
    tmp_path, monkeypatch, preprocessing
) -> None:
    """transformers' MobileViT runs at any input size as built (the reference's any_size {}):
    a sidecar's size and resize 'fit''s sizes are probed there, not left unchecked."""
    monkeypatch.setenv("VITVIZ_CACHE_DIR", str(tmp_path / "cache"))
    model = tiny_hf_mobilevit(seed=6)
    model.save_pretrained(tmp_path / "hf")
    proc = {"do_resize": True, "size": {"shortest_edge": SIZE}, "do_center_crop": True}
    proc["crop_size"] = {"height": SIZE, "width": SIZE}  # the config's size: vitviz's own
    (tmp_path / "hf" / "preprocessor_config.json").write_text(json.dumps(proc))
    sidecar_path(tmp_path / "hf").write_text(json.dumps({"preprocessing": preprocessing}))
    loaded = load_checkpoint(tmp_path / "hf")
    analysed = analysed_sizes(loaded.preprocessing, loaded.kind.input_stride(loaded.model))
    sizes = " and ".join(size_words(s) for s in probe_sizes(loaded.config.image_size, analysed))
    assert len(probe_sizes(loaded.config.image_size, analysed)) > 1, sizes
    note = next(n for n in loaded.notes if n.startswith("checked against transformers"))
    assert f"at {sizes}:" in note and "not checked at" not in note, note
    x = torch.randn(1, 3, 48, 48, generator=torch.Generator().manual_seed(3))
    _exact(loaded.model, model, x.flip(1), x)  # at 48×48 too, BGR as its processor feeds


def test_a_broken_transformers_folder_is_refused_in_one_line(tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    model = tiny_hf_mobilevit(seed=7)
    model.save_pretrained(tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    state = load_file(path)
    del state["mobilevit.encoder.layer.2.fusion.convolution.weight"]
    save_file(state, path)
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(tmp_path / "hf")
    line = str(refused.value)
    assert "\n" not in line and "fusion" in line


def test_a_bare_transformers_state_dict_asks_for_its_folder_in_one_line(tmp_path) -> None:
    """Its heads, norm eps and image processor are in config.json and preprocessor_config.json,
    and transformers' model for the check is built from the folder."""
    torch.save(tiny_hf_mobilevit(seed=8).state_dict(), tmp_path / "bare.pth")
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(tmp_path / "bare.pth")
    line = str(refused.value)
    assert "\n" not in line and "config.json" in line and "MobileViT" in line


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("mvit_hf") / "hf"
    tiny_hf_mobilevit(seed=8).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("key", "value"),
    [("output_stride", None), ("image_size", "big"), ("patch_size", []),
     ("num_attention_heads", 2.5), ("layer_norm_eps", "small")],
)  # fmt: skip
def test_a_bad_config_value_is_refused_in_one_line_naming_it(hf_folder, key, value) -> None:
    path = hf_folder / "config.json"
    saved = path.read_text()
    try:
        path.write_text(json.dumps({**json.loads(saved), key: value}))
        with pytest.raises(CheckpointError) as refused:
            load_checkpoint(hf_folder)
    finally:
        path.write_text(saved)
    line = str(refused.value)
    assert "\n" not in line and f"config.json's {key} is {value!r}" in line, line
