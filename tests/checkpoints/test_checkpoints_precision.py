"""Weights saved in float16 or bfloat16 load as float32 in every family: the
model gives the float32 result of the same (rounded) weights, and the user can ask otherwise."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import timm
import torch
from checkpoint_cases import tiny_tv_vit, write_weights
from conftest import random_vit
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from test_zoo_tutorial import EncoderLayerViT, LucidViT
from torch import Tensor
from transformers import ViTConfig as HFViTConfig
from transformers import ViTForImageClassification
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.pipeline.analysis import analyze

TOLERANCE = 1e-3  # float32 result of the same weights


def _timm(seed: int, classes: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = timm.create_model(
        "vit_small_patch16_224",
        pretrained=False,
        img_size=32,
        patch_size=8,
        embed_dim=48,
        depth=2,
        num_heads=3,
        num_classes=classes,
    )
    return randomize_(model, seed)


def _torchvision_pth(d: Path) -> tuple[Path, dict]:
    return write_weights(d / "vit.pth", tiny_tv_vit().state_dict()), {"heads": 2}


def _torchvision_safetensors(d: Path) -> tuple[Path, dict]:
    return write_weights(d / "vit.safetensors", tiny_tv_vit().state_dict()), {"heads": 2}


def _timm_pth(d: Path) -> tuple[Path, dict]:
    return write_weights(d / "deit.pth", {"model": _timm(1, 3).state_dict()}), {
        "heads": 3,
        "activation": "gelu",
    }


def _dino(d: Path) -> tuple[Path, dict]:
    return write_weights(d / "dino_vits8.pth", _timm(2, 0).state_dict()), {"heads": 3}


def _huggingface(d: Path) -> tuple[Path, dict]:
    torch.manual_seed(3)
    config = HFViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=3,
    )
    folder = d / "hf-vit"
    randomize_(ViTForImageClassification(config), 3).save_pretrained(folder)
    return folder, {}


def _vitviz_state_dict(d: Path) -> tuple[Path, dict]:
    model = random_vit(4)
    sd = {"model": model.state_dict(), "config": model.config.to_dict()}
    return write_weights(d / "own.pth", sd), {}


def _vitviz_native(d: Path) -> tuple[Path, dict]:
    return save_checkpoint(random_vit(5), d / "native.safetensors"), {}


def _tutorial_encoder(d: Path) -> tuple[Path, dict]:
    torch.manual_seed(6)
    model = randomize_(EncoderLayerViT(2, True, "gelu", final_norm=True), 6)
    settings = {"heads": 2, "norm_first": True, "activation": "gelu", "image_size": [16, 48]}
    return write_weights(d / "tel.pt", model.state_dict()), settings


def _vit_pytorch(d: Path) -> tuple[Path, dict]:
    torch.manual_seed(7)
    model = randomize_(LucidViT(4, 8, "cls"), 7)
    return write_weights(d / "lucid.pt", model.state_dict()), {"heads": 4, "image_size": [32, 48]}


FAMILIES: dict[str, Callable[[Path], tuple[Path, dict]]] = {
    "torchvision": _torchvision_pth,
    "torchvision-safetensors": _torchvision_safetensors,
    "timm": _timm_pth,
    "dino": _dino,
    "huggingface": _huggingface,
    "vitviz-state-dict": _vitviz_state_dict,
    "vitviz": _vitviz_native,
    "tutorial-transformer-encoder": _tutorial_encoder,
    "vit-pytorch": _vit_pytorch,
}


def _map_tensors(obj: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def _recast(src: Path, dst: Path, fn: Callable[[Tensor], Tensor]) -> Path:
    """A copy of the checkpoint ``src`` (file or folder) with every float tensor mapped by fn;
    metadata and files beside it kept."""
    if src.is_dir():
        shutil.copytree(src, dst)
        weights = dst / "model.safetensors"
        _recast(src / "model.safetensors", weights.with_suffix(".tmp"), fn)
        weights.with_suffix(".tmp").replace(weights)
        return dst
    if src.suffix == ".safetensors":
        with safe_open(str(src), "pt") as f:
            metadata = f.metadata()
        state = {k: fn(v).contiguous() for k, v in load_file(str(src)).items()}
        save_file(state, str(dst), metadata=metadata)
    else:
        torch.save(_map_tensors(torch.load(src, weights_only=True), fn), dst)
    return dst


def _run(loaded, x: Tensor) -> tuple[Tensor, Tensor]:
    """The model's output (logits, or features without a head) and the analysis's attention."""
    with torch.no_grad():
        out = loaded.model(x[None])[0]
    return out, analyze(loaded, x).attention


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_half_weights_load_as_float32_with_the_float32_result(
    tmp_path: Path, family: str, dtype: torch.dtype
) -> None:
    src, settings = FAMILIES[family](tmp_path)
    half = _recast(src, tmp_path / f"half-{src.name}", lambda t: t.to(dtype))
    rounded = _recast(src, tmp_path / f"rounded-{src.name}", lambda t: t.to(dtype).float())
    got = load_checkpoint(half, config=settings or None)
    want = load_checkpoint(rounded, config=settings or None)
    assert {p.dtype for p in got.model.parameters()} == {torch.float32}
    name = str(dtype).removeprefix("torch.")
    assert any(f"{name} tensors loaded as float32" in n for n in got.notes), got.notes
    h, w = got.config.image_size
    x = images(1, h, w, seed=1)[0]
    out, attention = _run(got, x)
    ref_out, ref_attention = _run(want, x)
    assert (out - ref_out).abs().max() <= TOLERANCE
    assert (attention - ref_attention).abs().max() <= TOLERANCE
    if dtype == torch.float16:  # and close to the weights before they were halved
        original = load_checkpoint(src, config=settings or None)
        assert (out - _run(original, x)[0]).abs().max() <= 1e-2


def test_float16_stays_float16_when_asked(tmp_path: Path) -> None:
    src, settings = _torchvision_safetensors(tmp_path)
    half = _recast(src, tmp_path / "half.safetensors", lambda t: t.half())
    loaded = load_checkpoint(half, config=settings, dtype=torch.float16)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float16}
    as_float = load_checkpoint(half, config=settings)
    x = images(1, 32, 32)
    with torch.no_grad():
        diff = (loaded.model.float()(x) - as_float.model(x)).abs().max()
    assert diff == 0  # the same numbers, only stored as asked
    with pytest.raises(TypeError, match=r"floating-point torch\.dtype"):
        load_checkpoint(half, config=settings, dtype=torch.int8)


def test_float64_weights_load_as_float32(tmp_path: Path) -> None:
    src, settings = _torchvision_pth(tmp_path)
    wide = _recast(src, tmp_path / "double.pth", lambda t: t.double())
    loaded = load_checkpoint(wide, config=settings)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    analysis = analyze(loaded, images(1, 32, 32)[0])
    assert torch.isfinite(analysis.logits).all()


def test_sidecar_beside_the_half_file_is_read(tmp_path: Path) -> None:
    src, _ = _torchvision_pth(tmp_path)
    half = _recast(src, tmp_path / "half.pth", lambda t: t.half())
    (tmp_path / "half.pth.vitviz.json").write_text(json.dumps({"heads": 2}))
    assert load_checkpoint(half).config.heads == 2
