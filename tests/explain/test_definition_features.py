"""The feature views (DESIGN §5: token-norm, similarity, pca, the logit lens) of a timm ViT
without a CLS token (a mean-pooled head, LayerNorm after the pooling): the query without a
click is the mean patch token, the readout head(fc_norm(mean(t_l))). The references read
the block outputs by the test's own hooks on timm's model, in float64."""

from __future__ import annotations

import json

import numpy as np
import pytest
import timm
import torch
from timm.models import save_for_hf
from torch import Tensor
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.feature_methods import feature_arrays
from vitviz.explain.methods import get_method
from vitviz.pipeline.analysis import analyze

SIZE, GRID = (24, 40), (3, 5)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """(timm model float64, vitviz analysis, L × (N, C) block outputs by the test's hooks)."""
    args = dict(img_size=SIZE, patch_size=8, embed_dim=32, depth=3, num_heads=4,
                class_token=False, global_pool="avg")  # fmt: skip
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", num_classes=5, **args)
    randomize_(model, seed=12, scale=0.3)
    assert model.num_prefix_tokens == 0 and not isinstance(model.fc_norm, torch.nn.Identity)
    root = tmp_path_factory.mktemp("features")
    save_for_hf(model, root / "vit", model_args=args, safe_serialization=True)
    (root / "vit.vitviz.json").write_text(json.dumps({}))
    analysis = analyze(load_checkpoint(root / "vit"), images(1, *SIZE, seed=6)[0])
    model = model.double().eval()
    seen: list[Tensor] = []
    hooks = [b.register_forward_hook(lambda _m, _a, out: seen.append(out[0])) for b in model.blocks]
    try:
        with torch.no_grad():
            model(analysis.input[None].double())
    finally:
        for h in hooks:
            h.remove()
    return model, analysis, seen


def close(got: Tensor, want: Tensor, tol: float = 1e-5) -> None:
    err = float((got.double() - want).abs().max())
    assert err < tol * (1 + float(want.abs().max())), err


@pytest.mark.parametrize("layer", [0, -1])
def test_token_norm(case, layer) -> None:
    _, analysis, blocks = case
    got = get_method("token-norm")(analysis, None, None, {"layer": layer})
    close(got, blocks[layer].norm(dim=-1).reshape(GRID))


@pytest.mark.parametrize("cell", [None, (2, 1)])
@pytest.mark.parametrize("layer", [1, -1])
def test_similarity_queries_the_mean_token_without_a_cls(case, layer, cell) -> None:
    _, analysis, blocks = case
    t = blocks[layer]  # (N, C): every token a patch
    q = t.mean(dim=0) if cell is None else t[cell[0] * GRID[1] + cell[1]]
    want = (t @ q) / (t.norm(dim=-1) * q.norm())
    got = get_method("similarity")(analysis, cell, None, {"layer": layer})
    close(got, want.reshape(GRID))


def test_pca_of_the_final_normed_tokens(case) -> None:
    model, analysis, blocks = case
    with torch.no_grad():
        # the network's final norm, here the one after the pool (timm's fc_norm; its ``norm``
        # is an identity), on each token
        f = model.fc_norm(model.norm(blocks[-1])).numpy()
    x = f - f.mean(axis=0)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    vt = vt[:3] * np.sign(vt[np.arange(3), np.abs(vt[:3]).argmax(axis=1)])[:, None]
    p = x @ vt.T
    want = torch.from_numpy((p - p.min(0)) / (p.max(0) - p.min(0))).reshape(*GRID, 3)
    got = get_method("pca")(analysis, None, None, {})
    close(got, want, 2e-4)


def test_logit_lens_reads_each_block_as_the_head_reads_the_last(case) -> None:
    model, analysis, blocks = case
    with torch.no_grad():
        want = torch.stack(
            [model.head(model.fc_norm(model.norm(t).mean(dim=0))).softmax(-1) for t in blocks]
        )
    got = torch.from_numpy(feature_arrays(analysis)["logit_lens"])
    close(got, want)
    close(analysis.probs, want[-1])
