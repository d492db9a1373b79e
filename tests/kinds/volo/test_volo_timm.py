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
from timm_zoo_checks import (
    assert_attentions_close,
    assert_checked_against_timm,
    assert_logits_close,
    broken,
    refused_in_one_line,
    save_state,
)
from volo_helpers import KINDS, SIZE, save_bare, save_folder, timm_attention, tiny_timm_volo
from zoo_helpers import images

from vitviz.checkpoints import MissingSettingsError, load_checkpoint

timm = pytest.importorskip("timm")

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
    scale = assert_logits_close(got, want)
    want_logits, want_attn = timm_attention(ref, x[:1])
    with torch.no_grad():
        out = loaded.model.forward_explained(x[:1])
    assert_logits_close(out.logits, want_logits, scale)
    assert_attentions_close(out.attentions, want_attn, len(KINDS))
    for a, how in zip(out.attentions, KINDS, strict=True):
        assert (a.ndim == 5) == (how == "outlook") and (a.shape[2] == 1) == (how == "class")
    assert_checked_against_timm(loaded)


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
    refused_in_one_line(path, "--arch", "heads", error=MissingSettingsError)
    save_bare(refs["aux"], path, {"arch": "volo_d1_224"})
    _compare(load_checkpoint(path), refs["aux"])


def test_a_name_whose_heads_in_timm_differ_from_vitviz_table_is_refused(
    refs, tmp_path: Path, monkeypatch
) -> None:
    from vitviz.kinds.volo import families

    depths, dims, _heads, ratio, stem = families.KNOWN["volo_d1"]
    monkeypatch.setitem(families.KNOWN, "volo_d1", (depths, dims, (6, 12, 12, 8), ratio, stem))
    path = save_bare(refs["aux"], tmp_path / "volo.pth", {"arch": "volo_d1_224"})
    refused_in_one_line(path, "6-12-12-12", "6-12-12-8")


def test_a_name_timm_lacks_is_refused_in_one_line(refs, tmp_path: Path) -> None:
    path = save_bare(refs["aux"], tmp_path / "volo.pth", {"arch": "volo_d1_999"})
    refused_in_one_line(path, "volo_d1_999", "can't build")


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
    refused_in_one_line(folder, "'avg'", "token")


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
    state = broken(refs["aux"].state_dict(), change)
    path = save_state(state, tmp_path / "volo.pth", {"arch": "volo_d1_224"})
    refused_in_one_line(path, words)
