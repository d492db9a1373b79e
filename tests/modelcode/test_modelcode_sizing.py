"""Model files that don't name their image size the usual way: a tutorial ViT taking ``img=48``.

The size is read from the position table when there is one, else found as the first size whose
forward pass runs, and the notes (API, ``vitviz-cli info``; the window's model info in
test_modelcode_ui) say which size was found and how; when no size runs, the message names the
sizes tried.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from test_modelcode_layouts import import_file, multihead_by_hand, scramble
from torch import Tensor, nn

from vitviz.cli import main
from vitviz.modelcode import ModelCodeError, extract_logits, load_model_code, make_spec, sizing
from vitviz.modelcode.importing import module_name_for
from vitviz.pipeline.analysis import analyze

TUTORIAL = '''
"""Vision Transformer from scratch (a course notebook, exported to a file)."""
import math

import torch
import torch.nn as nn


class PatchEmbedding(nn.Module):
    """Split the image into patches and project each one: (B, C, H, W) -> (B, n, dim)."""

    def __init__(self, img, patch, in_ch, dim):
        super().__init__()
        self.n_patches = (img // patch) ** 2
        self.proj = nn.Conv2d(in_ch, dim, kernel_size=patch, stride=patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class EncoderBlock(nn.Module):
    def __init__(self, dim, heads, mlp_dim, dropout=0.1):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout),
            nn.Linear(mlp_dim, dim), nn.Dropout(dropout),
        )

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h)[0]
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    def __init__(self, img=48, patch=8, in_ch=3, n_classes=10, dim=64, depth=4, heads=4,
                 mlp_dim=128):
        super().__init__()
        self.patch_embed = PatchEmbedding(img, patch, in_ch, dim)
        n = self.patch_embed.n_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, 1 + n, dim) * 0.02)
        self.dropout = nn.Dropout(0.1)
        self.blocks = nn.ModuleList(
            [EncoderBlock(dim, heads, mlp_dim) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embedding
        x = self.dropout(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])
'''

# The same tutorial with a fixed 2-D sine-cosine position embedding computed in the forward
# pass over the grid the constructor was told (no table to read): only img=48 runs.
SINCOS_AT_FORWARD = (
    TUTORIAL.replace(
        """class PatchEmbedding(nn.Module):""",
        '''def sincos_2d(grid, dim):
    """Fixed 2-D sine-cosine positions of a grid×grid patch layout: (grid², dim)."""
    ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    omega = 1.0 / 10000 ** (torch.arange(dim // 4) / (dim // 4 - 1))
    ys = ys.flatten()[:, None] * omega[None, :]
    xs = xs.flatten()[:, None] * omega[None, :]
    return torch.cat([xs.sin(), xs.cos(), ys.sin(), ys.cos()], dim=1)


class PatchEmbedding(nn.Module):''',
    )
    .replace(
        "        self.pos_embedding = nn.Parameter(torch.randn(1, 1 + n, dim) * 0.02)\n",
        "        self.grid = img // patch\n",
    )
    .replace(
        "        x = self.patch_embed(x)\n",
        "        x = self.patch_embed(x)\n"
        "        x = x + sincos_2d(self.grid, x.shape[-1]).to(x)\n",
    )
    .replace(
        "        x = torch.cat([cls, x], dim=1) + self.pos_embedding\n",
        "        x = torch.cat([cls, x], dim=1)\n",
    )
)

# Positions from the grid of the image itself: every size runs.
ANY_SIZE = SINCOS_AT_FORWARD.replace(
    "sincos_2d(self.grid, x.shape[-1])", "sincos_2d(math.isqrt(x.shape[1]), x.shape[-1])"
)

# A head that does not fit the token width: no size can run.
BROKEN_HEAD = TUTORIAL.replace("nn.Linear(dim, n_classes)", "nn.Linear(2 * dim, n_classes)")

# vit-pytorch style: einops patches into a Linear, the patch size under a name vitviz doesn't
# know (``ps``): both the patch size (from the Linear's 3·p² inputs) and the image size are found.
LINEAR_PATCHES = """
import torch
from einops.layers.torch import Rearrange
from torch import nn


class ViT(nn.Module):
    def __init__(self, img=48, ps=8, n_classes=10, dim=64, depth=2, heads=4):
        super().__init__()
        self.to_patch_embedding = nn.Sequential(
            Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=ps, p2=ps),
            nn.LayerNorm(3 * ps * ps),
            nn.Linear(3 * ps * ps, dim),
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, (img // ps) ** 2 + 1, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, batch_first=True)
        self.transformer = nn.TransformerEncoder(layer, depth)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        x = self.to_patch_embedding(x)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embedding
        return self.head(self.transformer(x)[:, 0])
"""

# Patches multiplied by a plain matrix; the first Linear (a block's qkv) takes 3·8² inputs.
FAKE_PATCH_LINEAR = """
import torch
from einops import rearrange
from torch import nn


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        qkv = rearrange(self.qkv(x), "b n (k h d) -> k b h n d", k=3, h=self.heads)
        attn = (qkv[0] @ qkv[1].transpose(-2, -1) * qkv.shape[-1] ** -0.5).softmax(dim=-1)
        return x + self.proj(rearrange(attn @ qkv[2], "b h n d -> b n (h d)"))


class ViT(nn.Module):
    def __init__(self, img=64, p=16, dim=192, depth=2, heads=3, n_classes=10):
        super().__init__()
        self.p = p
        self.embed = nn.Parameter(torch.randn(3 * p * p, dim) * 0.02)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.zeros(1, (img // p) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        x = rearrange(x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=self.p, p2=self.p)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x @ self.embed], dim=1)
        return self.head(self.blocks(x + self.pos_embedding)[:, 0])
"""

TABLE_NOTE = "image size 48 from the position table pos_embedding (37 tokens = 1 + 6×6, patch 8)"


def write(folder: Path, source: str, seed: int = 0) -> tuple[Path, Path, nn.Module]:
    """model.py, a state dict of trained-looking weights, and the model built from the file."""
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "model.py"
    file.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    torch.manual_seed(seed)
    model = import_file(file).ViT()
    scramble(model, seed)
    model.eval()
    weights = folder / "weights.pth"
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, weights)
    return file, weights, model


def image(seed: int, size: int = 48) -> Tensor:
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


def attention_of(model: nn.Module, x: Tensor) -> list[Tensor]:
    """Each nn.MultiheadAttention's attention, by hand from its input in a plain forward."""
    inputs: list[tuple[nn.Module, tuple]] = []
    handles = [
        m.register_forward_pre_hook(lambda mod, args: inputs.append((mod, args)))
        for m in model.modules()
        if isinstance(m, nn.MultiheadAttention)
    ]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    with torch.no_grad():
        return [multihead_by_hand(mod, args) for mod, args in inputs]


# -- the position table ---------------------------------------------------------------------


def test_tutorial_with_img_48_opens_from_its_file_with_no_settings(tmp_path: Path, photo_files):
    file, weights, model = write(tmp_path, TUTORIAL)
    loaded = load_model_code(make_spec(file, "ViT", checkpoint=weights))
    cfg = loaded.model.config
    assert cfg.image_size == (48, 48) and cfg.patch_size == 8 and cfg.grid_size == (6, 6)
    assert (cfg.depth, cfg.heads, cfg.num_prefix_tokens, cfg.num_classes) == (4, 4, 1, 10)
    assert loaded.preprocessing.image_size == (48, 48)
    assert TABLE_NOTE in loaded.notes
    x = image(3)
    with torch.no_grad():
        out = loaded.model.forward_explained(x)
        want = extract_logits(model(x), model)
    torch.testing.assert_close(out.logits, want, atol=1e-5, rtol=1e-5)
    for got, hand in zip(out.attentions, attention_of(model, x), strict=True):
        assert got.shape == (1, 4, 37, 37)
        torch.testing.assert_close(got, hand, atol=1e-6, rtol=1e-4)
    a = analyze(loaded, photo_files["chelsea"])
    assert a.attention.shape == (4, 4, 37, 37) and a.grid == (6, 6)
    relevance = a.relevance()
    assert relevance.shape == (6, 6) and torch.isfinite(relevance).all()
    assert float(relevance.max()) > 0


def test_cli_info_and_explain_say_how_the_size_was_found(tmp_path: Path, capsys, photo_files):
    file, weights, _ = write(tmp_path, TUTORIAL)
    assert main(["info", "--model-code", f"{file}:ViT"]) == 0
    text = capsys.readouterr().out
    assert "patch 8, image 48×48" in text
    assert f"note:           {TABLE_NOTE}\n" in text
    out = tmp_path / "out"
    argv = ["explain", str(photo_files["coffee"]), "--model-code", f"{file}:ViT"]
    argv += ["--checkpoint", str(weights), "--device", "cpu", "--out", str(out)]
    assert main(argv) == 0
    with np.load(out / "coffee.npz", allow_pickle=False) as z:
        assert z["attention"].shape == (4, 4, 37, 37)
        assert z["relevance"].shape == (6, 6) and np.isfinite(z["relevance"]).all()


def test_settings_and_arguments_still_win(tmp_path: Path):
    file, weights, _ = write(tmp_path, TUTORIAL)
    given = load_model_code(make_spec(file, "ViT", checkpoint=weights, settings={"image_size": 48}))
    assert "image size 48 given in the settings" in given.notes
    renamed = tmp_path / "renamed"
    file, weights, _ = write(renamed, TUTORIAL.replace("img", "image_size"))
    loaded = load_model_code(make_spec(file, "ViT", checkpoint=weights))
    assert "image size 48 from the argument image_size" in loaded.notes
    assert not any("position table" in n for n in loaded.notes)


def test_patch_size_read_from_a_linear_patch_embedding(tmp_path: Path):
    file, weights, model = write(tmp_path, LINEAR_PATCHES)
    loaded = load_model_code(make_spec(file, "ViT", checkpoint=weights))
    cfg = loaded.model.config
    assert (cfg.patch_size, cfg.image_size, cfg.num_prefix_tokens) == (8, (48, 48), 1)
    assert TABLE_NOTE in loaded.notes
    assert any(
        "patch size 8 from the first Linear layer (192 inputs = 3×8×8)" in n for n in loaded.notes
    )
    x = image(4)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), model(x), atol=1e-5, rtol=1e-5)


def test_a_linear_that_only_looks_like_patches_is_refused(tmp_path: Path):
    # Its first Linear takes 3·8² = 192 inputs, but it is a block's qkv over 17 tokens: the
    # patches (16 pixels) go through a plain matrix. The guess is checked, not used.
    file, weights, _ = write(tmp_path, FAKE_PATCH_LINEAR)
    with pytest.raises(ModelCodeError) as info:
        load_model_code(make_spec(file, "ViT", checkpoint=weights, settings={"image_size": 64}))
    assert str(info.value) == (
        "could not find the patch size: 8 was read from the first Linear layer (192 inputs = "
        "3×8×8), but that layer did not take the 64 patches of the image (its inputs: "
        '1×17×192); give it in the settings: --config FILE.json holding {"patch_size": P} (in '
        "the window: Patch size)"
    )
    loaded = load_model_code(
        make_spec(file, "ViT", checkpoint=weights, settings={"patch_size": 16})
    )
    assert loaded.model.config.image_size == (64, 64)
    assert (
        "image size 64 from the position table pos_embedding (17 tokens = 1 + 4×4, patch 16)"
        in (loaded.notes)
    )


# -- the forward probe -----------------------------------------------------------------------


def test_positions_computed_in_forward_are_found_by_probing(tmp_path: Path, photo_files):
    file, weights, model = write(tmp_path, SINCOS_AT_FORWARD)
    assert not any("pos" in name for name, _ in model.named_parameters())
    loaded = load_model_code(make_spec(file, "ViT", checkpoint=weights))
    assert loaded.model.config.image_size == (48, 48)
    assert loaded.model.config.num_prefix_tokens == 1
    note = next(n for n in loaded.notes if n.startswith("image size"))
    # Common sizes first, then the other multiples of the patch, smallest first.
    assert note == (
        "image size 48: the first size whose forward pass ran "
        "(tried 32, 64, 96, 128, 224, 256, 16, 24, 40, 48)"
    )
    assert torch.is_grad_enabled()
    x = image(5)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), model(x), atol=1e-5, rtol=1e-5)
    assert analyze(loaded, photo_files["rocket"]).grid == (6, 6)


def test_a_model_that_takes_any_size_says_so(tmp_path: Path):
    file, weights, _ = write(tmp_path, ANY_SIZE)
    loaded = load_model_code(make_spec(file, "ViT", checkpoint=weights))
    assert loaded.model.config.image_size == (32, 32)
    note = next(n for n in loaded.notes if n.startswith("image size"))
    assert note == (
        "image size 32: the first size whose forward pass ran; it runs at 64 too: if it was "
        "trained at another size, give it in the settings: --config FILE.json holding "
        '{"image_size": N} (in the window: Image size)'
    )


def test_no_size_that_runs_names_what_was_tried(tmp_path: Path, capsys):
    file, weights, _ = write(tmp_path, BROKEN_HEAD)
    with pytest.raises(ModelCodeError) as info:
        load_model_code(make_spec(file, "ViT", checkpoint=weights))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "could not find the image size the model takes: no image_size (or img_size) argument; "
        "its position table says 48 but the forward pass failed there; no forward pass ran on "
        "a 1×3×S×S image for S = 16, 24, …, 256 (every multiple of 8); at 48: RuntimeError: "
        "mat1 and mat2 shapes cannot be multiplied"
    )
    assert "(model.py, line " in message and "self.head(self.norm(x)[:, 0])" in message
    assert message.endswith(
        'give it in the settings: --config FILE.json holding {"image_size": N} (in the window: '
        "Image size), N the size it was trained at"
    )
    assert main(["info", "--model-code", f"{file}:ViT"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"vitviz-cli: {message}"


def test_probing_is_bounded_in_tries(tmp_path: Path, monkeypatch):
    source = BROKEN_HEAD.replace(
        "    def forward(self, x):\n        x = self.patch_embed(x)",
        "    def forward(self, x):\n        CALLS.append(x.shape[-1])\n"
        "        x = self.patch_embed(x)",
    ).replace("class PatchEmbedding", "CALLS = []\n\n\nclass PatchEmbedding")
    file, weights, _ = write(tmp_path, source)
    monkeypatch.setattr(sizing, "MAX_TRIES", 3)
    with pytest.raises(ModelCodeError) as info:
        load_model_code(make_spec(file, "ViT", checkpoint=weights))
    assert "S = 32, 48, 64 (stopped: time or try limit)" in str(info.value)
    calls = sys.modules[module_name_for(file.resolve())].CALLS  # the file as vitviz ran it
    assert calls == [48, 32, 64]  # the table's size, then the common sizes
    monkeypatch.setattr(sizing, "TIME_BUDGET_S", 0.0)
    with pytest.raises(ModelCodeError, match=r"S = none \(stopped: time or try limit\)"):
        load_model_code(make_spec(file, "ViT", checkpoint=weights))


def test_probing_leaves_no_hook_and_no_gradient(tmp_path: Path):
    _, _, model = write(tmp_path, LINEAR_PATCHES)
    linear = model.to_patch_embedding[2]
    assert sizing.check_patch_linear(model, linear, (48, 48), 8, 3) is None
    assert not linear._forward_pre_hooks
    problem = sizing.check_patch_linear(model, linear, (48, 48), 16, 3)
    assert problem == "that layer did not take the 9 patches of the image (its inputs: 1×36×192)"
    assert sizing.try_size(model, 3, 40, None) is not None  # 5×5 patches: the table is 6×6
    assert not linear._forward_pre_hooks and torch.is_grad_enabled()
