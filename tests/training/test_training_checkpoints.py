"""Training checkpoints that say what their model is: timm's train.py (``args`` Namespace,
``arch``, ``epoch``, optimizer state; ``args.yaml`` beside it), Lightning's ``hyper_parameters``,
a ``config`` entry. Each opens as the named timm model with the run's settings (checked against
timm's own model), or is refused by the name it gives."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import timm
import torch
from zoo_helpers import LOGIT_ATOL, assert_attention, assert_close, images, ours, randomize_
from zoo_helpers import timm_reference as reference

from vitviz.checkpoints import CheckpointError, load_checkpoint

SIZES = dict(img_size=32, patch_size=8, embed_dim=32, depth=2)
# A run whose settings no timm name has and the weights can't show: 8 heads of 4, tanh GELU,
# mean pooling without fc_norm.
RUN = dict(SIZES, num_heads=8, act_layer="gelu_tanh", fc_norm=False)


def trained(seed: int = 1) -> torch.nn.Module:
    model = timm.create_model("vit_tiny_patch16_224", num_classes=5, global_pool="avg", **RUN)
    return randomize_(model, seed=seed).eval()


def train_py_args(**changes) -> argparse.Namespace:
    """timm train.py's parsed arguments (the ones that build the model, and some that don't)."""
    values = dict(model="vit_tiny_patch16_224", num_classes=5, img_size=None, input_size=None,
                  in_chans=None, gp="avg", model_kwargs=dict(RUN), mean=None, std=None,
                  crop_pct=None, lr=0.05, epochs=10, pretrained=False)  # fmt: skip
    values.update(changes)
    return argparse.Namespace(**values)


def train_py_checkpoint(model: torch.nn.Module, args: argparse.Namespace) -> dict:
    """What timm's CheckpointSaver writes."""
    return {"epoch": 9, "arch": args.model, "state_dict": model.state_dict(),
            "optimizer": {"state": {}, "param_groups": [{"lr": 0.05, "params": [0, 1]}]},
            "version": 2, "args": args, "metric": 71.5}  # fmt: skip


def assert_exact(model: torch.nn.Module, loaded) -> None:
    x = images(2, 32, 32, seed=4)
    ref_logits, ref_attn = reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL * float(ref_logits.abs().max()))
    assert_attention(ref_attn, attn)


def test_a_train_py_checkpoint_opens_as_its_args_say(tmp_path: Path) -> None:
    model = trained()
    path = tmp_path / "model_best.pth.tar"
    torch.save(train_py_checkpoint(model, train_py_args()), path)
    loaded = load_checkpoint(path)
    assert loaded.config.heads == 8 and loaded.config.activation == "gelu_tanh"
    assert loaded.config.global_pool == "avg" and not loaded.config.fc_norm
    named = [n for n in loaded.notes if "vit_tiny_patch16_224" in n]
    assert any("named by the 'args' entry of the training checkpoint" in n for n in named), named
    assert_exact(model, loaded)


def test_args_yaml_beside_a_state_dict_names_the_model(tmp_path: Path) -> None:
    model = trained(seed=2)
    torch.save(model.state_dict(), tmp_path / "weights.pth")
    args = vars(train_py_args())
    import yaml

    (tmp_path / "args.yaml").write_text(yaml.safe_dump(args, default_flow_style=False))
    loaded = load_checkpoint(tmp_path / "weights.pth")
    assert any("named by args.yaml beside it" in n for n in loaded.notes), loaded.notes
    assert_exact(model, loaded)


def test_lightning_hyper_parameters_name_the_model(tmp_path: Path) -> None:
    model = trained(seed=3)
    hparams = {"model_name": "vit_tiny_patch16_224", "num_classes": 5, "global_pool": "avg",
               "model_kwargs": dict(RUN), "lr": 0.1}  # fmt: skip
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    path = tmp_path / "epoch=3.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": hparams, "epoch": 3}, path)
    loaded = load_checkpoint(path)
    assert any("'hyper_parameters' entry" in n for n in loaded.notes), loaded.notes
    assert_exact(model, loaded)


def test_a_train_py_checkpoint_of_a_model_vitviz_refuses_is_refused_by_name(
    tmp_path: Path,
) -> None:
    model = timm.create_model("convnext_atto", num_classes=3).eval()
    args = train_py_args(model="convnext_atto", num_classes=3, gp=None, model_kwargs={})
    path = tmp_path / "checkpoint-3.pth.tar"
    torch.save(train_py_checkpoint(model, args), path)
    with pytest.raises(CheckpointError, match=r"convnext_atto has timm's ConvNeXt") as caught:
        load_checkpoint(path)
    assert "\n" not in str(caught.value) and "needs code" not in str(caught.value)


def test_args_naming_a_vit_part_vitviz_lacks_is_refused_by_that_part(tmp_path: Path) -> None:
    kwargs = dict(SIZES, num_heads=4, attn_layer="diff")  # differential attention
    model = timm.create_model("vit_tiny_patch16_224", num_classes=5, **kwargs).eval()
    path = tmp_path / "model_best.pth.tar"
    torch.save(train_py_checkpoint(model, train_py_args(gp=None, model_kwargs=kwargs)), path)
    with pytest.raises(CheckpointError, match=r"vit_tiny_patch16_224 has differential attention"):
        load_checkpoint(path)


def test_only_the_namespace_is_admitted(tmp_path: Path) -> None:
    """Another class in the file (here a Path) is still refused as code, by its name."""
    model = trained()
    path = tmp_path / "model_best.pth.tar"
    torch.save({**train_py_checkpoint(model, train_py_args()), "output": Path("/tmp")}, path)
    with pytest.raises(CheckpointError, match="needs code to load"):
        load_checkpoint(path)


def test_a_fallback_arch_that_is_no_model_name_names_nothing(tmp_path: Path) -> None:
    """Without args, CheckpointSaver's arch is the class name ('visiontransformer'): not a
    name, so the file is read as a bare state dict (asked for what it can't say)."""
    model = trained()
    path = tmp_path / "last.pth.tar"
    torch.save({"epoch": 1, "arch": "visiontransformer", "state_dict": model.state_dict()}, path)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    assert "visiontransformer" not in str(caught.value)
