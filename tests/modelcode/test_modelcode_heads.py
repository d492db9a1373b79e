"""Model files that compute attention one head at a time (each head a module of its own, heads in
a Python loop over slices, and those beside an nn.MultiheadAttention block), opened from their
code: layers × heads grouped by the modules holding them, the logits of the file's own forward,
each head's attention and gradient as the modules run by hand, and every method's map against
its definition (float64 loops of tests/test_explain_*)."""

from __future__ import annotations

import math
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from test_explain_maps_stats import ref_mask
from test_explain_relevance import ref_relevance_matrix
from test_explain_rollout import ref_fuse, ref_grad_fused, ref_map, ref_rollout_matrix
from test_modelcode_layouts import import_file, scramble
from test_modelcode_models import _mha_by_hand, assert_probabilities_close
from torch import Tensor, nn

from vitviz import explain
from vitviz.checkpoints import LoadedModel
from vitviz.explain.methods import get_method
from vitviz.modelcode import (
    ModelCodeError,
    ModelCodeSpec,
    extract_logits,
    load_model_code,
    make_spec,
)
from vitviz.pipeline.analysis import analyze

COMMON = """
import torch
import torch.nn.functional as F
from torch import nn


class Head(nn.Module):
    def __init__(self, dim, size):
        super().__init__()
        self.query = nn.Linear(dim, size, bias=False)
        self.key = nn.Linear(dim, size, bias=False)
        self.value = nn.Linear(dim, size, bias=False)

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        w = F.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
        return w @ v


class MultiHead(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = nn.ModuleList([Head(dim, dim // heads) for _ in range(heads)])
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))


class LoopAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        d = q.shape[-1] // self.heads
        outs = []
        for h in range(self.heads):
            s = slice(h * d, (h + 1) * d)
            scores = q[..., s] @ k[..., s].transpose(-2, -1) * d**-0.5
            outs.append(scores.softmax(dim=-1) @ v[..., s])
        return self.out(torch.cat(outs, dim=-1))


class ImageLoopAttention(nn.Module):
    # each image, then each head, on its own (N, N) matrix (one Linear per head on a slice)

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        d = dim // heads
        self.q = nn.ModuleList([nn.Linear(d, d) for _ in range(heads)])
        self.k = nn.ModuleList([nn.Linear(d, d) for _ in range(heads)])
        self.v = nn.ModuleList([nn.Linear(d, d) for _ in range(heads)])
        self.out = nn.Linear(dim, dim)

    def one(self, seq, h):
        d = seq.shape[-1] // self.heads
        part = seq[:, h * d : (h + 1) * d]
        a = torch.softmax(self.q[h](part) @ self.k[h](part).T / d**0.5, dim=-1)
        return a @ self.v[h](part)

    def forward(self, x):
        rows = [torch.cat([self.one(seq, h) for h in range(self.heads)], dim=-1) for seq in x]
        return self.out(torch.stack(rows))


class HeadFirstAttention(ImageLoopAttention):
    # the same, each head then each image

    def forward(self, x):
        parts = [[self.one(x[b], h) for b in range(x.shape[0])] for h in range(self.heads)]
        rows = [torch.cat([parts[h][b] for h in range(self.heads)], -1) for b in range(len(x))]
        return self.out(torch.stack(rows))


class Block(nn.Module):
    def __init__(self, dim, heads, attention):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))
"""

HEAD_MODULES = """
class ViT(nn.Module):
    def __init__(self, image_size=32, patch_size=8, dim=32, heads=4, depth=2, num_classes=5):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch_size, patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2 + 1, dim))
        self.blocks = nn.ModuleList([Block(dim, heads, MultiHead) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])
"""

HEAD_LOOP = """
class ViT(nn.Module):
    def __init__(self, image_size=32, patch_size=8, dim=32, heads=4, depth=3, num_classes=5):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch_size, patch_size)
        self.pos = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, LoopAttention) for _ in range(depth)])
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.blocks(x).mean(dim=1))
"""

MIXED = """
class ViT(nn.Module):
    def __init__(self, image_size=32, patch_size=8, dim=32, heads=4, num_classes=5):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch_size, patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2 + 1, dim))
        self.layers = nn.ModuleList([
            Block(dim, heads, MultiHead),
            nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True,
                                       norm_first=True),
            Block(dim, heads, LoopAttention),
        ])
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(x[:, 0])
"""

IMAGE_LOOP = """
class ViT(nn.Module):
    def __init__(self, image_size=32, patch_size=8, dim=32, heads=2, depth=2, num_classes=5):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch_size, patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2 + 1, dim))
        self.blocks = nn.ModuleList([Block(dim, heads, ATTENTION) for _ in range(depth)])
        self.head = nn.Sequential(nn.Linear(dim, num_classes), nn.Softmax(dim=-1))

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(x[:, 0])
"""

# key: (source, depth, heads, prefix tokens)
MODELS = {
    "head_modules": (HEAD_MODULES, 2, 4, 1),
    "head_loop": (HEAD_LOOP, 3, 4, 0),
    "mixed_with_multihead": (MIXED, 3, 4, 1),
    "image_then_head_loop": (IMAGE_LOOP.replace("ATTENTION", "ImageLoopAttention"), 2, 2, 1),
    "head_then_image_loop": (IMAGE_LOOP.replace("ATTENTION", "HeadFirstAttention"), 2, 2, 1),
}
GRID = (4, 4)
QUERY = (1, 2)  # a patch: every map below is of this query's row


@dataclass
class Opened:
    key: str
    depth: int
    heads: int
    prefix: int
    model: nn.Module  # the file's model built the plain way, same weights
    loaded: LoadedModel
    spec: ModelCodeSpec


def _write(folder: Path, source: str) -> Path:
    """``source`` (after COMMON) as ``folder``/model.py."""
    file = folder / "model.py"
    file.write_text(textwrap.dedent(COMMON) + textwrap.dedent(source), encoding="utf-8")
    return file


def _open(folder: Path, source: str, seed: int, weights: str = "w.pth"):
    """The ``ViT`` that ``source`` defines (scrambled with ``seed``, in eval mode), its weights
    saved as ``weights``, and its spec; (model, spec)."""
    file = _write(folder, source)
    torch.manual_seed(0)
    model = import_file(file).ViT()
    scramble(model, seed)
    model.eval()
    torch.save(model.state_dict(), folder / weights)
    return model, make_spec(file, "ViT", {}, folder / weights)


@pytest.fixture(scope="module", params=list(MODELS))
def opened(request, tmp_path_factory) -> Opened:
    source, depth, heads, prefix = MODELS[request.param]
    model, spec = _open(tmp_path_factory.mktemp(request.param), source, 3, "weights.pth")
    return Opened(request.param, depth, heads, prefix, model, load_model_code(spec), spec)


# -- the modules run by hand: every head of a layer as one batched softmax ---------------------


def _heads_by_hand(self, x: Tensor) -> Tensor:
    """MultiHead written out: the heads' own Linears stacked, one (B, H, N, N) softmax."""
    weights = [torch.stack([getattr(h, n).weight for h in self.heads]) for n in ("query", "key")]
    q, k = (torch.einsum("bnc,hdc->bhnd", x, w) for w in weights)
    v = torch.einsum("bnc,hdc->bhnd", x, torch.stack([h.value.weight for h in self.heads]))
    a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    self.kept.append(a)
    return self.proj((a @ v).transpose(1, 2).flatten(2))


def _loop_by_hand(self, x: Tensor) -> Tensor:
    """LoopAttention written out with the heads as an axis: one (B, H, N, N) softmax."""
    B, N, D = x.shape
    H = self.heads
    q, k, v = (t.reshape(B, N, H, D // H).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
    a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D // H), dim=-1)
    self.kept.append(a)
    return self.out((a @ v).transpose(1, 2).reshape(B, N, D))


def _slices_by_hand(self, x: Tensor) -> Tensor:
    """ImageLoopAttention (and HeadFirstAttention) written out: every image and head at once."""
    B, N, D = x.shape
    H = self.heads
    parts = x.reshape(B, N, H, D // H).transpose(1, 2)  # (B, H, N, d)

    def per_head(linears: nn.ModuleList) -> Tensor:
        w = torch.stack([m.weight for m in linears])  # (H, d, d)
        b = torch.stack([m.bias for m in linears])  # (H, d)
        return torch.einsum("bhnc,hdc->bhnd", parts, w) + b[None, :, None]

    q, k, v = per_head(self.q), per_head(self.k), per_head(self.v)
    a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D // H), dim=-1)
    self.kept.append(a)
    return self.out((a @ v).transpose(1, 2).reshape(B, N, D))


def by_hand(model: nn.Module, x: Tensor, target: int | None = None):
    """L × (1, H, N, N) attention of the modules run by hand, and ∂y_c/∂A (c: ``target``, else
    the top class), and the logits. The file's model is patched for the call and restored."""
    kept: list[Tensor] = []
    patched = []
    for m in model.modules():
        name = type(m).__name__
        hand = {
            "MultiHead": _heads_by_hand,
            "LoopAttention": _loop_by_hand,
            "ImageLoopAttention": _slices_by_hand,
            "HeadFirstAttention": _slices_by_hand,
        }.get(name)
        if isinstance(m, nn.MultiheadAttention):
            hand = _mha_by_hand
        if hand is not None:
            m.kept = kept
            m.forward = types.MethodType(hand, m)
            patched.append(m)
    try:
        with torch.enable_grad():
            logits = extract_logits(model(x.clone().requires_grad_(True)), model)
            if loaded_reads_log(model):
                logits = logits.log()  # a softmax output: vitviz explains its log
            c = int(logits[0].argmax()) if target is None else target
            grads = torch.autograd.grad(logits[0, c], kept)
    finally:
        for m in patched:
            del m.forward, m.kept
    return [a.detach() for a in kept], [g.detach() for g in grads], logits.detach()


def loaded_reads_log(model: nn.Module) -> bool:
    """Whether the file's model ends in a softmax (its scores are probabilities)."""
    return isinstance(list(model.modules())[-1], nn.Softmax)


def sample(seed: int, batch: int = 1) -> Tensor:
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


# -- structure, logits, attention, gradients ---------------------------------------------------


def test_layers_and_heads_come_from_the_modules_holding_them(opened: Opened):
    cfg = opened.loaded.model.config
    assert (cfg.depth, cfg.heads, cfg.num_prefix_tokens) == (
        opened.depth,
        opened.heads,
        opened.prefix,
    )
    per_image = opened.key.endswith("image_loop") or opened.key.startswith("image")
    assert bool(cfg.head_spots) != per_image and bool(cfg.matrix_heads) == per_image
    if per_image:  # the order over a batch, found on a batch of two images
        assert cfg.matrix_by_image == opened.key.startswith("image")
    said = "one image and one head at a time" if per_image else "one head at a time"
    assert any(said in n for n in opened.loaded.notes)
    with torch.no_grad():
        out = opened.loaded.model.forward_explained(sample(1, batch=2))
    N = opened.prefix + 16
    assert [tuple(a.shape) for a in out.attentions] == [(2, opened.heads, N, N)] * opened.depth


def test_logits_are_the_files_own_forward(opened: Opened):
    x = sample(2, batch=3)
    with torch.no_grad():
        own = extract_logits(opened.model(x), opened.model)
        plain = opened.loaded.model(x)
        captured = opened.loaded.model.forward_explained(x, hidden_states=True).logits
    with torch.enable_grad():
        with_grad = opened.loaded.model.forward_explained(x).logits.detach()
    for got in (plain, captured, with_grad):
        if loaded_reads_log(opened.model):
            got = got.exp()  # probabilities are handed on as their log
        torch.testing.assert_close(got, own, atol=1e-5, rtol=1e-5)


def test_each_heads_attention_and_gradient_are_the_modules_run_by_hand(opened: Opened):
    x = sample(4)
    got = explain.attention_gradients(opened.loaded.model, x, target=3)
    attn, grads, _ = by_hand(opened.model, x, target=3)
    assert len(got.attentions) == len(attn) == opened.depth
    for a, want in zip(got.attentions, attn, strict=True):
        assert a.shape == want.shape == (1, opened.heads, opened.prefix + 16, opened.prefix + 16)
        assert_probabilities_close(a, want)
    for g, want in zip(got.gradients, grads, strict=True):
        torch.testing.assert_close(g, want, atol=1e-4 * float(want.abs().max()), rtol=1e-4)
        assert float(want.abs().max()) > 0


# -- every method against its definition --------------------------------------------------------


def _grid(values: list[float]) -> Tensor:
    gh, gw = GRID
    return torch.tensor(
        [[values[r * gw + c] for c in range(gw)] for r in range(gh)], dtype=torch.float64
    )


def _min_max(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [(v - lo) / (hi - lo) if hi > lo else 0.0 for v in values]


def _references(attn: list[Tensor], grads: list[Tensor], prefix: int) -> dict[str, Tensor]:
    """Each method's map for QUERY by its definition, float64 Python loops."""
    A = [a[0].double().tolist() for a in attn]  # L × H × N × N
    G = [g[0].double().tolist() for g in grads]
    L, H, N = len(A), len(A[0]), len(A[0][0])
    q = prefix + QUERY[0] * GRID[1] + QUERY[1]
    patches = range(prefix, N)
    refs = {}
    refs["attention"] = _grid([A[1][1][q][j] for j in patches])  # layer 1, head 1
    fused = [ref_fuse(a, "mean") for a in A]
    refs["rollout"] = _grid(ref_map(ref_rollout_matrix(fused, 0.0, 0, {q}), q, prefix))
    grad_fused = [ref_grad_fused(a, g) for a, g in zip(A, G, strict=True)]
    refs["gradient-rollout"] = _grid(
        ref_map(ref_rollout_matrix(grad_fused, 0.0, 0, {q}), q, prefix)
    )
    R = ref_relevance_matrix(A, G, 0)
    refs["relevance"] = _grid(_min_max([R[q][j] for j in patches]))
    sam = [
        sum(max(0.0, G[i][h][q][j]) * A[i][h][q][j] for i in range(L) for h in range(H)) / (L * H)
        for j in patches
    ]
    refs["grad-sam"] = _grid(_min_max(sam))
    weights = [sum(G[-1][h][q][j] for j in patches) / len(patches) for h in range(H)]
    cam = [max(0.0, sum(A[-1][h][q][j] * weights[h] for h in range(H)) / H) for j in patches]
    refs["attention-gradcam"] = _grid(_min_max(cam))
    kept = ref_mask([A[-1][0][q][j] for j in patches], 0.6)  # last layer, head 0
    refs["dino-masks"] = _grid([1.0 if t in kept else 0.0 for t in range(len(patches))])
    return refs


PARAMS = {
    "attention": {"layer": 1, "head": 1},
    "rollout": {"fusion": "mean", "discard_ratio": 0.0, "start_layer": 0},
    "gradient-rollout": {"discard_ratio": 0.0, "start_layer": 0},
    "relevance": {"start_layer": 0},
    "dino-masks": {"layer": -1, "threshold": 0.6, "head": 0},
}


def test_every_method_is_its_definition(opened: Opened, photo_files):
    a = analyze(opened.loaded, photo_files["chelsea"])
    x = a.input[None].float()
    attn, grads, logits = by_hand(opened.model, x)
    assert a.top_class == int(logits[0].argmax())
    refs = _references(attn, grads, opened.prefix)
    for name, want in refs.items():
        got = get_method(name)(a, QUERY, None, PARAMS.get(name, {})).double()
        assert got.shape == GRID, name
        torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4, msg=name)
    assert not torch.equal(refs["rollout"], refs["gradient-rollout"])
    for name in ("transformer-attribution", "gradcam"):  # refused on any model from code
        why = get_method(name).unavailable(a)
        assert why is not None and "comes from your code" in why, name


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_assembled_layers_are_the_cpus(opened: Opened, photo_files):
    cpu = analyze(opened.loaded, photo_files["chelsea"])
    gpu = analyze(load_model_code(opened.spec), photo_files["chelsea"], device="cuda")
    assert gpu.device.startswith("cuda")
    torch.testing.assert_close(gpu.attention.cpu(), cpu.attention, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(gpu.logits, cpu.logits, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(gpu.relevance(), cpu.relevance(), atol=1e-3, rtol=1e-3)


# -- what stays refused --------------------------------------------------------------------------


def test_heads_written_in_the_models_own_forward_are_refused(tmp_path: Path):
    source = textwrap.dedent(COMMON) + textwrap.dedent(
        """
        class ViT(nn.Module):
            def __init__(self, dim=32, heads=2, depth=2):
                super().__init__()
                self.patch = nn.Conv2d(3, dim, 8, 8)
                self.qkv = nn.ModuleList([nn.Linear(dim, 3 * dim) for _ in range(depth)])
                self.heads = heads
                self.head = nn.Linear(dim, 3)

            def forward(self, x):
                x = self.patch(x).flatten(2).transpose(1, 2)
                d = x.shape[-1] // self.heads
                for qkv in self.qkv:
                    q, k, v = qkv(x).chunk(3, dim=-1)
                    outs = []
                    for h in range(self.heads):
                        s = slice(h * d, (h + 1) * d)
                        a = (q[..., s] @ k[..., s].transpose(-2, -1)).softmax(dim=-1)
                        outs.append(a @ v[..., s])
                    x = x + torch.cat(outs, dim=-1)
                return self.head(x.mean(dim=1))
        """
    )
    file = tmp_path / "model.py"
    file.write_text(source, encoding="utf-8")
    with pytest.raises(ModelCodeError, match="outside any module: vitviz can't tell"):
        load_model_code(make_spec(file, "ViT", {}))


def test_images_that_mix_in_a_per_image_loop_are_refused(tmp_path: Path):
    mixing = (
        "class Mixing(ImageLoopAttention):\n"
        "    def forward(self, x):\n"
        "        return super().forward(x + x.mean(dim=0, keepdim=True))\n"
    )
    source = mixing + IMAGE_LOOP.replace("ATTENTION", "Mixing")
    file = tmp_path / "model.py"
    file.write_text(textwrap.dedent(COMMON) + source, encoding="utf-8")
    with pytest.raises(ModelCodeError, match=r"neither order .* gives each image the attention"):
        load_model_code(make_spec(file, "ViT", {}))


def _refused(tmp_path: Path, source: str) -> str:
    file = _write(tmp_path, source)
    with pytest.raises(ModelCodeError) as info:
        load_model_code(make_spec(file, "ViT", {}))
    return str(info.value)


def _assert_by_hand(loaded, model: nn.Module, x: Tensor, target: int) -> int:
    """Each head's attention and gradient of ``loaded`` equal ``model``'s run by hand; returns
    the layers compared."""
    got = explain.attention_gradients(loaded.model, x, target=target)
    attn, grads, _ = by_hand(model, x, target=target)
    for a, want in zip(got.attentions, attn, strict=True):
        assert_probabilities_close(a, want)
    for g, want in zip(got.gradients, grads, strict=True):
        torch.testing.assert_close(g, want, atol=1e-4 * float(want.abs().max()), rtol=1e-4)
    return len(attn)


def test_layers_of_different_head_counts_are_refused(tmp_path: Path):
    source = HEAD_MODULES.replace(
        "[Block(dim, heads, MultiHead) for _ in range(depth)]",
        "[Block(dim, heads // (i + 1), MultiHead) for i in range(depth)]",
    )
    assert source != HEAD_MODULES
    message = _refused(tmp_path, source)
    assert "the heads don't group into layers of one head count" in message
    assert "4 in blocks.0.attn.heads, 2 in blocks.1.attn.heads" in message


def test_head_modules_reading_different_inputs_are_refused(tmp_path: Path):
    source = (
        "class Scaled(MultiHead):\n"
        "    def forward(self, x):\n"
        "        outs = [h(x * (i + 1)) for i, h in enumerate(self.heads)]\n"
        "        return self.proj(torch.cat(outs, dim=-1))\n"
        + HEAD_MODULES.replace("Block(dim, heads, MultiHead)", "Block(dim, heads, Scaled)")
    )
    message = _refused(tmp_path, source)
    assert "the one-head modules of blocks.0.attn.heads don't all read one input" in message


def test_heads_are_found_where_the_layer_list_holds_other_modules_too(tmp_path: Path):
    """A ModuleList of blocks ending in a wider Linear is no block container: each head is
    still the list element that makes one softmax, each block (several) is not."""
    source = HEAD_MODULES.replace(
        "[Block(dim, heads, MultiHead) for _ in range(depth)]",
        "[Block(dim, heads, MultiHead) for _ in range(depth)] + [nn.Linear(dim, 2 * dim)]",
    ).replace("self.norm = nn.LayerNorm(dim)", "self.norm = nn.LayerNorm(2 * dim)")
    source = source.replace(
        "self.head = nn.Linear(dim, num_classes)", "self.head = nn.Linear(2 * dim, num_classes)"
    )
    model, spec = _open(tmp_path, source, 5)
    loaded = load_model_code(spec)
    assert (loaded.model.config.depth, loaded.model.config.heads) == (2, 4)
    _assert_by_hand(loaded, model, sample(6), 0)


TWO_LOOPS = """
class TwoLoops(nn.Module):
    # two attentions one after the other, each a loop over its heads, in one module's forward

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.first = nn.Linear(dim, 3 * dim)
        self.second = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        for qkv in (self.first, self.second):
            q, k, v = qkv(x).chunk(3, dim=-1)
            d = q.shape[-1] // self.heads
            outs = []
            for h in range(self.heads):
                s = slice(h * d, (h + 1) * d)
                a = (q[..., s] @ k[..., s].transpose(-2, -1) * d**-0.5).softmax(dim=-1)
                outs.append(a @ v[..., s])
            x = x + torch.cat(outs, dim=-1)
        return x
"""


def test_two_attentions_looped_in_one_module_are_refused_not_shown_as_one(tmp_path: Path):
    """Both loops run inside one call of one module: grouped by that call they made one layer
    of 2·H heads, the second attention's heads reading the first's result."""
    source = TWO_LOOPS + HEAD_MODULES.replace(
        "Block(dim, heads, MultiHead)", "TwoLoops(dim, heads)"
    )
    message = _refused(tmp_path, source)
    assert "one head reads another's result" in message and "layer 0" in message


def test_heads_computed_in_another_order_than_listed_are_refused(tmp_path: Path):
    """Reversed, the projection reads head k's output where the list holds head H-1-k: ordered
    by the list, every head's map would be shown under another head's number."""
    source = (
        "class Reversed(MultiHead):\n"
        "    def forward(self, x):\n"
        "        return self.proj(torch.cat([h(x) for h in reversed(self.heads)], dim=-1))\n"
        + HEAD_MODULES.replace("Block(dim, heads, MultiHead)", "Block(dim, heads, Reversed)")
    )
    message = _refused(tmp_path, source)
    assert "blocks.0.attn.heads in another order than listed (3, 2, 1, 0)" in message


def test_two_attention_modules_in_one_block_are_two_layers(tmp_path: Path):
    source = """
class TwoAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.a1 = MultiHead(dim, heads)
        self.a2 = MultiHead(dim, heads)

    def forward(self, x):
        x = x + self.a1(x)
        return x + self.a2(x)
""" + HEAD_MODULES.replace("Block(dim, heads, MultiHead)", "TwoAttention(dim, heads)")
    model, spec = _open(tmp_path, source, 7)
    loaded = load_model_code(spec)
    assert (loaded.model.config.depth, loaded.model.config.heads) == (4, 4)
    assert _assert_by_hand(loaded, model, sample(8), 1) == 4


def test_heads_concatenated_in_another_order_than_listed_are_refused(tmp_path: Path):
    """Computed in list order, concatenated reversed: the projection's slice k holds head
    H-1-k's output, so numbered by the list every head's map would carry another's number."""
    source = (
        "class CatReversed(MultiHead):\n"
        "    def forward(self, x):\n"
        "        outs = [h(x) for h in self.heads]\n"
        "        return self.proj(torch.cat(outs[::-1], dim=-1))\n"
        + HEAD_MODULES.replace("Block(dim, heads, MultiHead)", "Block(dim, heads, CatReversed)")
    )
    message = _refused(tmp_path, source)
    assert (
        "projection beside blocks.0.attn.heads reads its heads in the order 3, 2, 1, 0" in message
    )
