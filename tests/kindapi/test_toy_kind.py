"""A kind is one package: a third kind, defined in this file alone and
registered at run time, goes through ``vitviz-cli explain``, ``faithfulness`` and ``stats`` and
through the window (head-grid rows, a query click, export) with no product file edited for it.

The toy: a tiny attention network over a 4 × 4 grid of 8-pixel patches with no CLS token (its
classifier pools the tokens), two layers of two heads. Its rollout is its own: the product of
the layers' (mean of heads + identity, rows renormalised), read as the mean of the rows (the
tokens the pool averages), so a wrong dispatch gives other numbers.
"""

from __future__ import annotations

import csv
import math
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_ui_window import WAIT_MS, click, drop, settled, wait_shown
from torch import Tensor, nn
from window_watch import watched_window

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.cli import main
from vitviz.kindapi import register_kind, unregister_kind
from vitviz.kindapi.protocol import (
    KindMethod,
    LayerGrid,
    LayerRow,
    QueryMaps,
    TokenGeometry,
    ViewWords,
)
from vitviz.kinds.table_kind import TableKind

SIDE, PATCH, GRID = 32, 8, 4  # input side, patch side, tokens per side
CLASSES = ["circle", "square", "stripe"]


# -- the network -------------------------------------------------------------------------------
@dataclass
class PoolConfig:
    image_size: tuple[int, int] = (SIDE, SIDE)
    patch_size: int = PATCH
    in_channels: int = 3
    num_classes: int = len(CLASSES)
    dim: int = 8
    depth: int = 2
    heads: int = 2

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "image_size": list(self.image_size)}


class PoolBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, N, D) -> (B, N, D) and its attention (B, heads, N, N)."""
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x)), attn


class PoolNet(nn.Module):
    """Patches -> blocks -> mean of the tokens -> classes. ``forward`` gives the logits;
    ``explained`` the logits and every layer's attention."""

    def __init__(self, config: PoolConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embed = nn.Conv2d(c.in_channels, c.dim, c.patch_size, stride=c.patch_size)
        self.pos = nn.Parameter(torch.randn(1, GRID * GRID, c.dim) * 0.5)
        self.blocks = nn.ModuleList(PoolBlock(c.dim, c.heads) for _ in range(c.depth))
        self.norm = nn.LayerNorm(c.dim)
        self.head = nn.Linear(c.dim, c.num_classes)

    def explained(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        t = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        attentions = []
        for block in self.blocks:
            t, a = block(t)
            attentions.append(a)
        return self.head(self.norm(t).mean(1)), attentions

    def forward(self, x: Tensor) -> Tensor:
        return self.explained(x)[0]


# -- its analysis and methods ------------------------------------------------------------------
@dataclass
class PoolAnalysis:
    kind: str
    input: Tensor  # (C, H, W)
    pixels: np.ndarray  # (H, W, 3) uint8
    logits: Tensor
    probs: Tensor
    attentions: list[Tensor]  # per layer (heads, N, N)
    class_names: list[str]
    loaded: Any
    source: Any = None
    geometry: Any = None
    target_class: int = 0

    @property
    def top_class(self) -> int:
        return int(self.probs.argmax())


def pooled_rollout(a: PoolAnalysis) -> Tensor:
    """(GRID, GRID): the mean row of prod_l norm(mean_h A_l + I)."""
    n = a.attentions[0].shape[-1]
    joint = torch.eye(n, dtype=torch.float64)
    for attn in a.attentions:
        m = attn.double().mean(0) + torch.eye(n, dtype=torch.float64)
        joint = (m / m.sum(-1, keepdim=True)) @ joint
    return joint.mean(0).float().reshape(GRID, GRID)


def _rollout(a: Any, query: Any, target: Any, params: Mapping[str, Any]) -> Tensor:
    return pooled_rollout(a)


def _last_attention(a: Any, query: Any, target: Any, params: Mapping[str, Any]) -> Tensor:
    rows = a.attentions[-1].mean(0)  # (N, N)
    row = rows.mean(0) if query is None else rows[query[0] * GRID + query[1]]
    return row.reshape(GRID, GRID).float()


METHODS = {
    "rollout": KindMethod(_rollout, takes=frozenset()),
    "attention": KindMethod(_last_attention, takes=frozenset()),
}


def _thumbs(a: PoolAnalysis, query: tuple[int, int] | None) -> np.ndarray:
    """(L, heads, GRID, GRID) the query's rows (None: the mean row, what the pool reads)."""
    out = []
    for attn in a.attentions:
        rows = attn.mean(1) if query is None else attn[:, query[0] * GRID + query[1]]
        out.append(rows.reshape(-1, GRID, GRID).float().numpy())
    return np.stack(out)


class PoolKind(TableKind):
    """The third kind: what is its own, on ``TableKind``'s defaults; nothing asked by name."""

    name = "toy-pool"
    label = "Pooled attention toy"

    def owns(self, model: nn.Module) -> bool:
        return isinstance(model, PoolNet)

    def architecture(self, model: nn.Module) -> str:
        c = model.config
        return f"toy: dim {c.dim}, depth {c.depth}, heads {c.heads}, pooled"

    # loading (a native file names its kind)
    def config_from_dict(self, data: dict[str, object]) -> PoolConfig:
        return PoolConfig(**{**data, "image_size": tuple(data["image_size"])})

    def build_from_state(self, config: PoolConfig, state: Mapping[str, Tensor]) -> nn.Module:
        model = PoolNet(config)
        model.load_state_dict(state, strict=True)
        return model.eval()

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, None]:
        return model(x), None

    # analysis
    def analyze(self, loaded: Any, image: Any, **options: Any) -> PoolAnalysis:
        from vitviz.imaging import load_image, prepare_image

        model = loaded.model
        source = load_image(image)
        prepared = prepare_image(source, loaded.preprocessing, PATCH)
        p = next(model.parameters())
        with torch.no_grad():
            logits, attentions = model.explained(prepared.tensor[None].to(p.device, p.dtype))
        logits = logits[0].float().cpu()
        probs = logits.softmax(-1)
        return PoolAnalysis(
            kind=self.name,
            input=prepared.tensor,
            pixels=prepared.pixels,
            logits=logits,
            probs=probs,
            attentions=[a[0].float().cpu() for a in attentions],
            class_names=list(loaded.class_names),
            loaded=loaded,
            source=source,
            geometry=prepared.geometry,
            target_class=int(probs.argmax()),
        )

    def token_geometry(self, analysis: PoolAnalysis) -> TokenGeometry:
        layer = LayerGrid(grid=(GRID, GRID), token_pixels=PATCH)
        return TokenGeometry(
            input_size=(SIDE, SIDE),
            grid=(GRID, GRID),
            cell_pixels=PATCH,
            layers=(layer,) * len(analysis.attentions),
        )

    # methods
    def implementation(self, method: str) -> KindMethod | None:
        return METHODS.get(method)

    def missing_method(self, method: str) -> str | None:
        return None if method in METHODS else "the toy has only rollout and attention"

    def parameter_bounds(self, subject: Any) -> tuple[int, int]:
        if isinstance(subject, nn.Module):
            return subject.config.depth, subject.config.heads
        return len(subject.attentions), int(subject.attentions[0].shape[0])

    def head_statistics(self, analysis: PoolAnalysis) -> dict[str, np.ndarray]:
        """Entropy of the rows, per head; distance and prefix share left NaN (not defined
        here), so stats.csv's entropy columns are the toy's and its distance columns NaN."""
        ent = [-(a * (a + 1e-12).log()).sum(-1).mean(-1).numpy() for a in analysis.attentions]
        nan = np.full((len(ent), len(ent[0])), np.nan, dtype=np.float32)
        return {"distance": nan, "entropy": np.stack(ent).astype(np.float32),
                "prefix_share": nan}  # fmt: skip

    # export and window
    def npz_arrays(self, analysis: PoolAnalysis) -> dict[str, np.ndarray]:
        return {"toy_attention": np.stack([a.numpy() for a in analysis.attentions])}

    def unused_options(self) -> Mapping[str, str]:
        return {"batch_size": "is not used on the toy", "layers": "keeps every layer",
                "attention_dtype": "is not used", "max_side": "is not used"}  # fmt: skip

    def layer_rows(self, analysis: PoolAnalysis) -> tuple[LayerRow, ...]:
        return tuple(
            LayerRow(f"T{i + 1}", int(a.shape[0]), name=f"T{i + 1}", title=f"toy layer {i + 1}")
            for i, a in enumerate(analysis.attentions)
        )

    def view_words(self, analysis: PoolAnalysis) -> ViewWords:
        return ViewWords(layer="toy layer", query_none="the pool")

    def query_maps(self, session: Any, query: tuple[int, int] | None) -> QueryMaps:
        maps = _thumbs(session.analysis, query)
        token = -1 if query is None else query[0] * GRID + query[1]
        return QueryMaps(
            head_maps=maps,
            mean_maps=maps.mean(1),
            layer_maps=tuple(maps),
            prefix_attention=np.zeros((*maps.shape[:2], 0), np.float32),
            query_tokens=(token,) * len(maps),
            levels=(float(maps.min()), float(maps.max())),
        )


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture
def toy() -> Iterator[PoolKind]:
    kind = register_kind(PoolKind())
    try:
        yield kind
    finally:
        unregister_kind(PoolKind.name)


@pytest.fixture
def toy_ckpt(tmp_path: Path, toy: PoolKind) -> Path:
    torch.manual_seed(5)
    net = PoolNet(PoolConfig()).eval()
    with torch.no_grad():
        for p in net.parameters():  # no zero biases or unit norms: a wrong path shows
            p.add_(torch.randn_like(p) * 0.3)
    return save_checkpoint(net, tmp_path / "toy.safetensors", class_names=CLASSES)


@pytest.fixture
def images(tmp_path: Path, photo_files: dict[str, Path]) -> list[Path]:
    folder = tmp_path / "images"
    folder.mkdir()
    for p in list(photo_files.values())[:3]:
        shutil.copy(p, folder / p.name)
    return sorted(folder.iterdir())


def _reference(ckpt: Path, image: Path) -> PoolAnalysis:
    return PoolKind().analyze(load_checkpoint(ckpt), image)


# -- the command line ------------------------------------------------------------------------
def test_explain_writes_the_toys_own_maps(toy_ckpt: Path, images: list[Path], tmp_path) -> None:
    out = tmp_path / "explain"
    argv = ["explain", str(images[0]), "--checkpoint", str(toy_ckpt), "--out", str(out)]
    assert main([*argv, "--method", "attention"]) == 0
    with np.load(out / f"{images[0].stem}.npz") as z:
        assert str(z["kind"]) == PoolKind.name
        ref = _reference(toy_ckpt, images[0])
        np.testing.assert_allclose(z["rollout"], pooled_rollout(ref).numpy(), rtol=1e-5)
        np.testing.assert_allclose(z["logits"], ref.logits.numpy(), rtol=1e-5)
        assert np.isnan(z["relevance"]).all()  # the toy has no relevance: NaN, not a ViT's
        np.testing.assert_allclose(z["map_attention"], _thumbs(ref, None)[-1].mean(0), rtol=1e-5)
        assert z["toy_attention"].shape == (2, 2, GRID * GRID, GRID * GRID)
    assert (out / f"{images[0].stem}_rollout.png").is_file()


def test_explain_refuses_a_method_the_toy_lacks(toy_ckpt: Path, images, tmp_path, capsys) -> None:
    argv = ["explain", str(images[0]), "--checkpoint", str(toy_ckpt), "--out", str(tmp_path)]
    assert main([*argv, "--method", "relevance"]) != 0
    assert "the toy has only rollout and attention" in capsys.readouterr().err


def test_faithfulness_runs_on_the_toys_grid(toy_ckpt: Path, images, tmp_path: Path) -> None:
    """Every method the toy has, by default (relevance and the ViT's others don't apply)."""
    out = tmp_path / "faith"
    argv = ["faithfulness", str(images[0]), "--checkpoint", str(toy_ckpt), "--out", str(out)]
    assert main([*argv, "--steps", "4"]) == 0
    with open(out / "faithfulness.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted({r["method"] for r in rows}) == ["attention", "rollout"], rows[:1]


def test_stats_average_the_toys_head_statistics(toy_ckpt: Path, images, tmp_path) -> None:
    out = tmp_path / "stats"
    folder = images[0].parent
    assert main(["stats", str(folder), "--checkpoint", str(toy_ckpt), "--out", str(out)]) == 0
    with open(out / "stats.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert [(int(r[1]), int(r[2])) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    want = np.mean([PoolKind().head_statistics(_reference(toy_ckpt, p))["entropy"]
                    for p in images], axis=0).ravel()  # fmt: skip
    np.testing.assert_allclose([float(r[6]) for r in rows], want, rtol=1e-5)
    assert {r[4] for r in rows} == {"nan"}


# -- the window ------------------------------------------------------------------------------
@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def test_the_window_shows_the_toy(qtbot, window, toy_ckpt: Path, images, tmp_path) -> None:
    drop(window, [images[0], toy_ckpt])
    wait_shown(qtbot, window, images[0].name)
    v = window.viewer
    ref = _reference(toy_ckpt, images[0])
    assert v.head_grid.shape == (2, 2)
    assert v.layers.rows()[0] == ["T1", "T2"]  # the kind's row labels
    np.testing.assert_allclose(v.maps.head_maps, _thumbs(ref, None), atol=1e-5)
    patch = (2, 1)
    centre = v.map_view.vb.mapViewToScene(v.map_view.patch_rect(*patch).center())
    click(v.map_view, centre)
    assert v.query == patch
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    np.testing.assert_allclose(v.maps.head_maps, _thumbs(ref, patch), atol=1e-5)
    npz = tmp_path / "window.npz"
    with qtbot.waitSignal(window.client.resultReady, timeout=WAIT_MS,
                          check_params_cb=lambda ch, _r: ch == "export"):  # fmt: skip
        window.export_to(npz, "npz")
    with np.load(npz) as z:
        assert str(z["kind"]) == PoolKind.name
        np.testing.assert_allclose(z["rollout"], pooled_rollout(ref).numpy(), rtol=1e-5)
