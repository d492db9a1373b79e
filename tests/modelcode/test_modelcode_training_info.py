"""A training checkpoint's ``config``, ``arch`` and ``epoch`` read for a model from code: the
config (or the architecture's name) handed to the file's constructor where it needs one that
--model-args left out, all three noted in the model info; a config class is still left to the
user's factory."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from test_modelcode_layouts import import_file, scramble

from vitviz.modelcode import ModelCodeError, extract_logits, load_model_code, make_spec
from vitviz.modelcode.training_info import constructor_args, read_training_info

CONFIG_DICT = Path(__file__).resolve().parents[1] / "tutorial_models" / "config_dict_vit.py"
CONFIG = {"image_size": 32, "patch_size": 8, "in_channels": 3, "dim": 32, "heads": 4}
CONFIG |= {"depth": 2, "num_classes": 6}

BY_ARCH = """
import torch
from torch import nn

SIZES = {"vit-pico": (16, 1), "vit-nano": (32, 2)}


class Net(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 8, 8)
        self.pos = nn.Parameter(torch.zeros(1, 16, dim))
        layer = lambda: nn.TransformerEncoderLayer(dim, 2, 2 * dim, 0.0, batch_first=True)
        self.blocks = nn.ModuleList([layer() for _ in range(depth)])
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=1))


def build(arch):
    dim, depth = SIZES[arch]
    return Net(dim, depth)
"""

DATACLASS_CONFIG = """
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Cfg:
    dim: int = 16


class ViT(nn.Module):
    def __init__(self, cfg: Cfg):
        super().__init__()
        self.patch = nn.Conv2d(3, cfg.dim, 8, 8)
        self.attn = nn.MultiheadAttention(cfg.dim, 2, batch_first=True)
        self.head = nn.Linear(cfg.dim, 3)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        return self.head(self.attn(x, x, x)[0].mean(dim=1))
"""


def _sample() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(7))


def test_the_checkpoints_config_builds_a_model_that_takes_one(tmp_path: Path):
    torch.manual_seed(0)
    model = import_file(CONFIG_DICT).ViT(CONFIG)
    scramble(model, 1)
    model.eval()
    ckpt = {"model_state": model.state_dict(), "config": CONFIG, "epoch": 7, "arch": "vit-s8"}
    torch.save(ckpt, tmp_path / "last.pth")
    loaded = load_model_code(make_spec(CONFIG_DICT, "ViT", {}, tmp_path / "last.pth"))
    cfg = loaded.model.config
    assert (cfg.depth, cfg.heads, cfg.num_classes, cfg.patch_size) == (2, 4, 6, 8)
    notes = loaded.notes
    assert any(
        n.startswith("the constructor's 'config' is the checkpoint's 'config'") for n in notes
    )
    assert "epoch 7 (the checkpoint's 'epoch')" in notes
    assert "architecture 'vit-s8' named in the checkpoint's 'arch'" in notes
    x = _sample()
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.model.forward_explained(x).logits,
            extract_logits(model(x), model),
            atol=1e-5,
            rtol=1e-5,
        )


def test_given_arguments_win_over_the_checkpoints_config(tmp_path: Path):
    torch.manual_seed(0)
    model = import_file(CONFIG_DICT).ViT(CONFIG)
    torch.save({"model": model.state_dict(), "config": CONFIG | {"depth": 5}}, tmp_path / "w.pth")
    loaded = load_model_code(make_spec(CONFIG_DICT, "ViT", {"config": CONFIG}, tmp_path / "w.pth"))
    assert loaded.model.config.depth == 2
    assert not any("the constructor's" in n for n in loaded.notes)


def test_the_checkpoints_arch_names_the_architecture_a_factory_builds(tmp_path: Path):
    file = tmp_path / "by_arch.py"
    file.write_text(textwrap.dedent(BY_ARCH), encoding="utf-8")
    torch.manual_seed(0)
    model = import_file(file).build("vit-nano")
    scramble(model, 2)
    model.eval()
    torch.save({"state_dict": model.state_dict(), "arch": "vit-nano"}, tmp_path / "w.pth")
    loaded = load_model_code(make_spec(file, "build", {}, tmp_path / "w.pth"))
    assert (loaded.model.config.depth, loaded.model.config.dim) == (2, 32)
    assert "the constructor's 'arch' is the checkpoint's 'arch'" in loaded.notes
    x = _sample()
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), model(x), atol=1e-5, rtol=1e-5)


def test_a_config_class_is_not_made_from_the_checkpoints_dict(tmp_path: Path):
    file = tmp_path / "dc.py"
    file.write_text(textwrap.dedent(DATACLASS_CONFIG), encoding="utf-8")
    module = import_file(file)
    model = module.ViT(module.Cfg())
    torch.save({"model": model.state_dict(), "config": {"dim": 16}}, tmp_path / "w.pth")
    with pytest.raises(ModelCodeError, match="write a two-line factory"):
        load_model_code(make_spec(file, "ViT", {}, tmp_path / "w.pth"))


def test_only_plain_values_at_the_top_level_are_read():
    info = read_training_info({"cfg": {"dim": 8, "w": torch.zeros(2)}, "epoch": True})
    assert (info.config, info.epoch, info.arch) == (None, None, None)
    import argparse

    info = read_training_info({"args": argparse.Namespace(dim=8), "epoch": 3})
    assert (info.config, info.config_key, info.epoch) == ({"dim": 8}, "args", 3)

    def factory(args, depth=2):
        return args, depth

    args, notes = constructor_args(factory, {}, info)
    assert args == {"args": {"dim": 8}} and notes == [
        "the constructor's 'args' is the checkpoint's 'args' (dim)"
    ]
