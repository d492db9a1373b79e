"""The feature maps (DESIGN §5: token-norm, similarity, pca), the logit lens and the npz's
token_norms against float64 references written here from their definitions, on a torchvision
ViT and a timm DINOv2 ViT with registers (perturbed weights, non-zero heads) opened through
vitviz; high-norm tokens flagged on a model with planted ones."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from conftest import CLASS_NAMES, random_vit
from torch import Tensor, nn
from torchvision.models.vision_transformer import VisionTransformer as TorchvisionViT
from zoo_helpers import randomize_

from vitviz.checkpoints import LoadedModel, load_checkpoint
from vitviz.explain.feature_methods import feature_arrays, high_norm_tokens, joint_pca
from vitviz.explain.methods import get_method
from vitviz.imaging import Preprocessing
from vitviz.pipeline.analysis import analyze

timm = pytest.importorskip("timm")


# -- float64 references, from the definitions ----------------------------------------------------


def ref_norms(blocks: list[Tensor], prefix: int) -> list[Tensor]:
    """‖t_l‖₂ of every token (N,) per block, from (1, N, C) block outputs."""
    return [b[0].norm(dim=-1) for b in blocks]


def ref_cosine(tokens: Tensor, q: Tensor) -> Tensor:
    return (tokens @ q) / (tokens.norm(dim=-1) * q.norm())


def ref_pca(f: Tensor) -> Tensor:
    """(N, C) -> (N, 3): centred, first three PCs (numpy's SVD), each PC's direction signed so
    its largest-magnitude entry is positive, each channel min-max scaled."""
    x = f.double().numpy()
    x = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    vt = vt[:3]
    vt = vt * np.sign(vt[np.arange(3), np.abs(vt).argmax(axis=1)])[:, None]
    p = x @ vt.T
    return torch.from_numpy((p - p.min(0)) / (p.max(0) - p.min(0)))


def ref_mask(norms: np.ndarray) -> np.ndarray:
    med = np.median(norms)
    return norms > med + 4 * np.median(np.abs(norms - med))


# -- the checkpoints -----------------------------------------------------------------------------


class Ref:
    """A library model in float64 and how to read its block outputs (1, 1 + P + N, C), final
    norm and head."""

    def __init__(self, model: nn.Module, blocks, norm, head, prefix: int, grid) -> None:
        self.model = copy.deepcopy(model).double().eval()
        self.blocks, self.norm, self.head = blocks, norm, head
        self.prefix, self.grid = prefix, grid

    def run(self, x: Tensor) -> list[Tensor]:
        seen: list[Tensor] = []
        mods = self.blocks(self.model)
        hooks = [m.register_forward_hook(lambda _m, _a, out: seen.append(out)) for m in mods]
        try:
            with torch.no_grad():
                self.model(x.double()[None])
        finally:
            for h in hooks:
                h.remove()
        return seen


@pytest.fixture(scope="module")
def torchvision_case(tmp_path_factory) -> tuple[object, Ref]:
    torch.manual_seed(0)
    model = TorchvisionViT(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                           hidden_dim=16, mlp_dim=32, num_classes=5)  # fmt: skip
    model = randomize_(model, seed=3, scale=0.4)
    assert float(model.heads.head.weight.detach().abs().min()) > 0
    path = tmp_path_factory.mktemp("tv") / "vit.pth"
    torch.save(model.state_dict(), path)
    path.with_name("vit.pth.vitviz.json").write_text(json.dumps({"heads": 2}))
    loaded = load_checkpoint(path)
    ref = Ref(
        model,
        lambda m: list(m.encoder.layers),
        lambda m, t: m.encoder.ln(t),
        lambda m, t: m.heads.head(t),
        1,
        (4, 4),
    )
    return loaded, ref


@pytest.fixture(scope="module")
def timm_case(tmp_path_factory) -> tuple[object, Ref]:
    from timm.models import save_for_hf

    args = dict(img_size=28, patch_size=7, embed_dim=32, depth=2, num_heads=2, reg_tokens=4)
    torch.manual_seed(1)
    model = timm.create_model("vit_small_patch14_reg4_dinov2", num_classes=5, **args)
    model = randomize_(model, seed=4, scale=0.4)
    folder = tmp_path_factory.mktemp("timm") / "reg"
    save_for_hf(model, folder, model_args=args, safe_serialization=True)
    loaded = load_checkpoint(folder)
    ref = Ref(model, lambda m: list(m.blocks), lambda m, t: m.norm(t), lambda m, t: m.head(t),
              5, (4, 4))  # fmt: skip
    return loaded, ref


@pytest.fixture(scope="module", params=["torchvision", "timm-registers"])
def case(request, torchvision_case, timm_case):
    loaded, ref = torchvision_case if request.param == "torchvision" else timm_case
    gen = torch.Generator().manual_seed(7)
    image = (torch.rand(3, 32, 32, generator=gen) * 255).to(torch.uint8).permute(1, 2, 0)
    analysis = analyze(loaded, image.numpy())
    return loaded, ref, analysis, ref.run(analysis.input)


def _close(got: Tensor, want: Tensor, rtol: float = 1e-5) -> None:
    scale = float(want.abs().max())
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=rtol * scale)


# -- the maps ------------------------------------------------------------------------------------


@pytest.mark.parametrize("layer", [0, -1])
def test_token_norm_is_the_patch_tokens_norm(case, layer: int) -> None:
    _, ref, analysis, blocks = case
    got = get_method("token-norm")(analysis, None, None, {"layer": layer})
    want = ref_norms(blocks, ref.prefix)[layer][ref.prefix :].reshape(ref.grid)
    _close(got, want)


@pytest.mark.parametrize(("layer", "cell"), [(0, None), (-1, None), (0, (1, 2)), (-1, (3, 0))])
def test_similarity_is_the_cosine_with_the_query(case, layer: int, cell) -> None:
    _, ref, analysis, blocks = case
    got = get_method("similarity")(analysis, cell, None, {"layer": layer})
    tokens = blocks[layer][0]
    q = tokens[0] if cell is None else tokens[ref.prefix + cell[0] * ref.grid[1] + cell[1]]
    _close(got, ref_cosine(tokens[ref.prefix :], q).reshape(ref.grid))


def test_pca_is_the_first_three_components_as_colours(case) -> None:
    _, ref, analysis, blocks = case
    got = get_method("pca")(analysis, None, None, {})
    with torch.no_grad():
        f = ref.norm(ref.model, blocks[-1][0])[ref.prefix :]
    assert got.shape == (*ref.grid, 3)
    torch.testing.assert_close(got.double(), ref_pca(f).reshape(*ref.grid, 3), atol=2e-4, rtol=0)


def test_pca_foreground_refits_on_the_foreground(case) -> None:
    _, ref, analysis, blocks = case
    got = get_method("pca")(analysis, None, None, {"foreground": 0.5})
    with torch.no_grad():
        f = ref.norm(ref.model, blocks[-1][0])[ref.prefix :]
    first = ref_pca(f)[:, 0]
    fg = first > 0.5
    want = torch.zeros(f.shape[0], 3, dtype=torch.float64)
    want[fg] = ref_pca(f[fg])
    assert 0 < int(fg.sum()) < f.shape[0]
    torch.testing.assert_close(got.double(), want.reshape(*ref.grid, 3), atol=2e-4, rtol=0)


def test_joint_pca_fits_both_images_at_once(case) -> None:
    loaded, ref, analysis, blocks = case
    other = analyze(loaded, np.full((32, 32, 3), 90, dtype=np.uint8))
    maps = joint_pca([analysis, other])
    with torch.no_grad():
        fa = ref.norm(ref.model, blocks[-1][0])[ref.prefix :]
        fb = ref.norm(ref.model, ref.run(other.input)[-1][0])[ref.prefix :]
    want = ref_pca(torch.cat([fa, fb]))
    n = fa.shape[0]
    np.testing.assert_allclose(maps[0].reshape(-1, 3), want[:n].numpy(), atol=2e-4)
    np.testing.assert_allclose(maps[1].reshape(-1, 3), want[n:].numpy(), atol=2e-4)


def test_logit_lens_and_token_norms_in_the_npz(case) -> None:
    _, ref, analysis, blocks = case
    arrays = feature_arrays(analysis)
    with torch.no_grad():
        want = torch.stack(
            [ref.head(ref.model, ref.norm(ref.model, b[0, 0])).softmax(-1) for b in blocks]
        )
    _close(torch.from_numpy(arrays["logit_lens"]), want)
    torch.testing.assert_close(torch.from_numpy(arrays["logit_lens"][-1]), analysis.probs,
                               rtol=1e-4, atol=1e-6)  # fmt: skip
    _close(torch.from_numpy(arrays["token_norms"]), torch.stack(ref_norms(blocks, ref.prefix)))


def test_registers_are_listed_beside_the_norm_map(timm_case) -> None:
    loaded, ref = timm_case
    analysis = analyze(loaded, np.full((32, 32, 3), 30, dtype=np.uint8))
    blocks = ref.run(analysis.input)
    shown = high_norm_tokens(analysis, layer=0)
    assert shown["prefix"].shape == (5,)  # the CLS and four registers
    _close(torch.from_numpy(shown["prefix"]), blocks[0][0, :5].norm(dim=-1))


# -- high-norm tokens ----------------------------------------------------------------------------


PLANTED = [(0, 3), (2, 1)]


def test_planted_high_norm_tokens_are_flagged() -> None:
    model = random_vit(seed=2)
    with torch.no_grad():
        for r, c in PLANTED:  # a large position vector: those tokens carry it through
            model.pos_embed[0, 1 + r * 4 + c] += 60.0
    loaded = LoadedModel(model, CLASS_NAMES, Preprocessing(image_size=(32, 32)), "vitviz")
    analysis = analyze(loaded, np.full((32, 32, 3), 128, dtype=np.uint8))
    for layer in (0, -1):
        shown = high_norm_tokens(analysis, layer)
        assert sorted(zip(*np.nonzero(shown["high"]), strict=True)) == PLANTED
        np.testing.assert_array_equal(shown["high"], ref_mask(shown["norms"].astype(np.float64)))


def test_no_token_is_flagged_without_planting() -> None:
    model = random_vit(seed=2)
    loaded = LoadedModel(model, CLASS_NAMES, Preprocessing(image_size=(32, 32)), "vitviz")
    analysis = analyze(loaded, np.full((32, 32, 3), 128, dtype=np.uint8))
    shown = high_norm_tokens(analysis)
    np.testing.assert_array_equal(shown["high"], ref_mask(shown["norms"].astype(np.float64)))
    assert not shown["high"].all()


def test_the_table_lists_pca_as_an_rgb_map() -> None:
    assert get_method("pca").map_kind == "rgb"
    assert get_method("token-norm").map_kind == "scalar"
    assert get_method("pca").to_dict()["map_kind"] == "rgb"
    with pytest.raises(ValueError, match="map_kind"):
        from vitviz.explain.methods import Method

        Method("x-y", "X", None, map_kind="grey")


def test_a_layer_out_of_range_is_one_plain_message(case) -> None:
    _, _, analysis, _ = case
    with pytest.raises(ValueError, match="layer"):
        get_method("token-norm")(analysis, None, None, {"layer": 7})
