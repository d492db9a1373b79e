"""timm's VOLO opened by vitviz, as a timm folder and as a bare state dict, with perturbed
weights and BatchNorm statistics: logits within 1e-4 (relative) and every attention layer's
(outlookers' window weights, transformer blocks', class blocks') within 1e-5 of timm's own
model, at 64 px; with and without the aux head, with qkv biases, without a head; the library
check ran; timm's volo_* names (each base, each image size) are recognised from their shapes
(the image size from the position table); a bare file of no name is refused asking for
--arch, and opens with it; broken files and an unmodelled pooling are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from volo_helpers import KINDS, SIZE, save_bare, save_folder, timm_attention, tiny_timm_volo
from zoo_helpers import images

from vitviz.checkpoints import CheckpointError, MissingSettingsError, load_checkpoint

timm = pytest.importorskip("timm")

LOGITS_RTOL, ATTENTION_ATOL = 1e-4, 1e-5
VARIANTS = {
    "aux": {},
    "no-aux": dict(use_aux_head=False),
    "qkv-bias": dict(qkv_bias=True),
    "headless": dict(num_classes=0),  # the normed CLS, timm's pre-logits
}


@pytest.fixture(scope="module")
def refs() -> dict[str, torch.nn.Module]:
    return {k: tiny_timm_volo(seed=3 + i, **v) for i, (k, v) in enumerate(VARIANTS.items())}


def _compare(loaded, ref: torch.nn.Module) -> None:
    x = images(2, SIZE, SIZE, seed=4)
    with torch.no_grad():
        want = ref(x)
        got = loaded.model(x)
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) / scale < LOGITS_RTOL
    want_logits, want_attn = timm_attention(ref, x[:1])
    with torch.no_grad():
        out = loaded.model.forward_explained(x[:1])
    assert float((out.logits - want_logits).abs().max()) / scale < LOGITS_RTOL
    assert len(out.attentions) == len(want_attn) == len(KINDS)
    for a, b, how in zip(out.attentions, want_attn, KINDS, strict=True):
        assert a.shape == b.shape and (a.ndim == 5) == (how == "outlook")
        assert (a.shape[2] == 1) == (how == "class")
        assert float((a - b).abs().max()) < ATTENTION_ATOL
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_timm_folder_opens_exactly(refs, tmp_path: Path, variant: str) -> None:
    loaded = load_checkpoint(save_folder(refs[variant], tmp_path / "volo"))
    cfg = loaded.model.config
    assert loaded.kind.name == "volo" and cfg.aux_head == (
        variant == "aux" or variant == "qkv-bias"
    )
    assert cfg.heads == (6, 12, 12, 12) and cfg.image_size == (SIZE, SIZE)
    _compare(loaded, refs[variant])


@pytest.mark.parametrize("variant", ["aux", "qkv-bias"])
def test_a_bare_state_dict_opens_exactly_with_its_name(refs, tmp_path: Path, variant) -> None:
    path = save_bare(refs[variant], tmp_path / "volo.pth", {"arch": "volo_d1_224"})
    _compare(load_checkpoint(path), refs[variant])


def test_a_bare_file_of_no_timm_name_asks_for_arch_and_opens_with_it(refs, tmp_path: Path):
    path = save_bare(refs["aux"], tmp_path / "volo.pth")
    with pytest.raises(MissingSettingsError) as info:
        load_checkpoint(path)
    text = str(info.value)
    assert "\n" not in text and "--arch" in text and "heads" in text, text
    save_bare(refs["aux"], path, {"arch": "volo_d1_224"})
    _compare(load_checkpoint(path), refs["aux"])


def test_a_name_whose_heads_in_timm_differ_from_vitviz_table_is_refused(
    refs, tmp_path: Path, monkeypatch
) -> None:
    from vitviz.kinds.volo import families

    depths, dims, _heads, ratio, stem = families.KNOWN["volo_d1"]
    monkeypatch.setitem(families.KNOWN, "volo_d1", (depths, dims, (6, 12, 12, 8), ratio, stem))
    path = save_bare(refs["aux"], tmp_path / "volo.pth", {"arch": "volo_d1_224"})
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    text = str(info.value)
    assert "\n" not in text and "6-12-12-12" in text and "6-12-12-8" in text, text


def test_a_name_timm_lacks_is_refused_in_one_line(refs, tmp_path: Path) -> None:
    path = save_bare(refs["aux"], tmp_path / "volo.pth", {"arch": "volo_d1_999"})
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    text = str(info.value)
    assert "\n" not in text and "volo_d1_999" in text and "can't build" in text, text


@pytest.mark.parametrize(
    "name",
    [
        "volo_d1_224", "volo_d1_384", "volo_d2_224", "volo_d3_448", "volo_d4_224",
        "volo_d5_512",
    ],
)  # fmt: skip
def test_timms_names_are_recognised_by_their_shapes(name: str) -> None:
    from vitviz.kinds.volo.families import KNOWN, _shape, recognised

    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    shape = _shape(SimpleNamespace(state=model.state_dict(), name="m.pth"))
    assert recognised(shape) == name
    size = int(name.rsplit("_", 1)[1])
    assert shape["image_size"] == (size, size)
    assert shape["outlook_heads"] == KNOWN[name.rsplit("_", 1)[0]][2][0]


def test_a_folder_of_mean_pooling_is_refused_in_one_line(refs, tmp_path: Path) -> None:
    folder = save_folder(refs["aux"], tmp_path / "volo")
    config = json.loads((folder / "config.json").read_text())
    config["model_args"]["global_pool"] = "avg"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(folder)
    text = str(info.value)
    assert "\n" not in text and "'avg'" in text and "token" in text, text


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("drop", "network.2.0.mlp.fc1.weight"), "lacks"),
        (("drop", "network.1.proj.weight"), "downsample"),
        (("drop", "network.0.0.norm1.weight"), "numbered"),
        (("drop_prefix", "post_network."), "class-attention"),
        (("set", "network.0.0.attn.attn.weight", torch.zeros(100, 24)), "multiple of 81"),
        (("set", "network.3.0.attn.qkv.weight", torch.zeros(100, 48)), "shape"),
    ],
)
def test_a_broken_volo_is_refused_in_one_line(refs, tmp_path: Path, change, words) -> None:
    state = dict(refs["aux"].state_dict())
    if change[0] == "drop":
        del state[change[1]]
    elif change[0] == "drop_prefix":
        state = {k: v for k, v in state.items() if not k.startswith(change[1])}
    else:
        state[change[1]] = change[2]
    path = tmp_path / "volo.pth"
    torch.save(state, path)
    path.with_name(path.name + ".vitviz.json").write_text('{"arch": "volo_d1_224"}')
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    text = str(info.value)
    assert "\n" not in text and words in text, text
