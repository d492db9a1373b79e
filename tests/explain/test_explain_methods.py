"""The method table: registry, parameters, and every method against its definition.

Grad-SAM, Grad-CAM on attention and token Grad-CAM are checked in float64 against plain
loops written from their definitions (DESIGN §5); the methods that wrap what the Analysis
already offers are checked to be exactly those, with their parameters passed through.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import CLASS_NAMES, random_vit

from vitviz.checkpoints import LoadedModel
from vitviz.explain import (
    Method,
    Parameter,
    all_methods,
    attention_gradcam,
    get_method,
    grad_sam,
    random_map,
    register_method,
    token_gradcam,
    transformer_attribution,
    unregister_method,
)
from vitviz.explain.methods import methods_for, model_kind
from vitviz.imaging import Preprocessing
from vitviz.pipeline.analysis import analyze

BUILTIN = (
    "attention",
    "rollout",
    "gradient-rollout",
    "relevance",
    "dino-masks",
    "transformer-attribution",
    "grad-sam",
    "attention-gradcam",
    "gradcam",
    "random",
    "token-norm",
    "similarity",
    "pca",
    "hirescam",
    "gradcam-plusplus",
    "xgradcam",
    "layercam",
    "gradcam-elementwise",
    "eigen-gradcam",
    "eigencam",
    "scorecam",
    "ablationcam",
)
GRID = (3, 5)  # non-square on purpose


def make_analysis(seed: int = 0, **overrides):
    """A float32 Analysis of a tiny random ViT on a 24 × 40 input (3 × 5 patches)."""
    model = random_vit(seed, image_size=(24, 40), **overrides)
    n = model.config.num_classes
    names = CLASS_NAMES[:n] if n <= len(CLASS_NAMES) else [f"c{i}" for i in range(n)]
    loaded = LoadedModel(model, names, Preprocessing(image_size=(24, 40)), "vitviz")
    x = torch.randn(3, 24, 40, generator=torch.Generator().manual_seed(100 + seed))
    return analyze(loaded, x)


@pytest.fixture(scope="module")
def analysis():
    return make_analysis(0, num_register_tokens=1)


# -- the registry ---------------------------------------------------------------------------------


def test_the_table_holds_the_fixed_names_in_order():
    names = tuple(m.name for m in all_methods())
    assert names[: len(BUILTIN)] == BUILTIN
    for m in all_methods():
        assert get_method(m.name) is m
        assert m.key == "map_" + m.name.replace("-", "_")
    assert get_method("transformer-attribution").key == "map_transformer_attribution"


def test_unknown_method_is_a_plain_message():
    with pytest.raises(ValueError, match="unknown method 'lime'; accepted: attention, rollout"):
        get_method("lime")


def _toy(a, query, target_class, params):
    """A toy method: the patch index times ``scale``, as a (gh, gw) map."""
    gh, gw = a.grid
    return torch.arange(gh * gw, dtype=torch.float32).reshape(gh, gw) * params["scale"]


def test_a_toy_method_registered_at_run_time_is_in_the_table(analysis):
    toy = Method(
        "toy-index",
        "Toy (patch index)",
        _toy,
        (Parameter("scale", float, 1.0, "Scale", range=(0.0, 10.0)),),
        applies_to=frozenset({"vit"}),
    )
    register_method(toy)
    try:
        assert all_methods()[-1] is toy
        assert get_method("toy-index") is toy
        assert toy in methods_for(analysis)
        out = get_method("toy-index")(analysis, params={"scale": 2.0})
        assert torch.equal(out, torch.arange(15, dtype=torch.float32).reshape(3, 5) * 2)
        with pytest.raises(ValueError, match="already registered"):
            register_method(toy)
        twin = Method("toy-index", "Toy again", _toy, toy.parameters)
        assert register_method(twin, replace=True) is get_method("toy-index")
    finally:
        unregister_method("toy-index")
    assert "toy-index" not in [m.name for m in all_methods()]
    with pytest.raises(ValueError, match="unknown method"):
        get_method("toy-index")


def test_names_must_be_lower_case_words_with_dashes():
    for bad in ("Grad-SAM", "grad_sam", "-x", "x-", "a--b", ""):
        with pytest.raises(ValueError, match="lower-case"):
            Method(bad, "x", _toy)
    with pytest.raises(ValueError, match="twice"):
        p = Parameter("scale", float, 1.0, "Scale")
        Method("twice", "x", _toy, (p, p))


def test_the_table_describes_itself_as_json():
    described = json.loads(json.dumps([m.to_dict() for m in all_methods()]))
    by_name = {d["name"]: d for d in described}
    rollout = by_name["rollout"]
    assert [p["name"] for p in rollout["parameters"]] == ["fusion", "discard_ratio", "start_layer"]
    assert rollout["parameters"][0]["choices"] == ["mean", "max", "min"]
    assert by_name["transformer-attribution"]["needs_gradients"] is True
    assert by_name["transformer-attribution"]["applies_to"] == ["cait", "clip", "vit", "xcit"]
    assert by_name["random"]["parameters"][0]["name"] == "seed"
    assert by_name["gradcam"]["queries"] is False


# -- parameters -----------------------------------------------------------------------------------


def test_parameters_are_checked_with_plain_messages():
    rollout = get_method("rollout")
    assert rollout.resolve() == {"fusion": "mean", "discard_ratio": 0.0, "start_layer": 0}
    assert rollout.resolve({"fusion": "max", "discard_ratio": 0.5})["fusion"] == "max"
    with pytest.raises(ValueError, match="fusion must be one of mean, max, min"):
        rollout.resolve({"fusion": "median"})
    with pytest.raises(ValueError, match=r"discard_ratio must be in 0.0..0.99"):
        rollout.resolve({"discard_ratio": 1.0})
    with pytest.raises(ValueError, match="rollout has no parameter 'seed'; its parameters"):
        rollout.resolve({"seed": 1})
    assert rollout.resolve({"seed": 1, "threshold": 0.3}, strict=False)["fusion"] == "mean"
    with pytest.raises(ValueError, match=r"start_layer must be in 0\.\.3"):
        rollout.resolve({"start_layer": 4}, num_layers=4)
    assert rollout.resolve({"start_layer": 3}, num_layers=4)["start_layer"] == 3
    with pytest.raises(ValueError, match="must be a whole number"):
        rollout.resolve({"start_layer": 1.5})
    with pytest.raises(ValueError, match="takes none"):
        get_method("grad-sam").resolve({"x": 1})


def test_parameters_parse_command_line_text():
    att = get_method("attention")
    assert att.parse_params({"layer": "-1", "head": "2"}) == {"layer": -1, "head": 2}
    assert get_method("rollout").parse_params({"discard_ratio": "0.25"}) == {"discard_ratio": 0.25}
    with pytest.raises(ValueError, match="head must be a whole number"):
        att.parse_params({"head": "two"})
    with pytest.raises(ValueError, match="head must be -1 or more"):
        att.parse_params({"head": "-2"})
    flag = Parameter("smooth", bool, False, "Smooth")
    assert flag.parse("yes") is True and flag.parse("0") is False
    assert att.parameter("head").bounds(num_layers=4, num_heads=6) == (-1, 5)


def test_model_bounds_are_checked_when_the_map_is_computed(analysis):
    with pytest.raises(ValueError, match=r"layer must be in -1\.\.1"):
        get_method("attention")(analysis, params={"layer": 2})
    with pytest.raises(ValueError, match=r"head must be in -1\.\.1"):
        get_method("dino-masks")(analysis, params={"head": 2})
    with pytest.raises(ValueError, match="outside the 3×5 grid"):
        get_method("rollout")(analysis, (3, 0))
    with pytest.raises(ValueError, match="class 9 is out of range"):
        get_method("relevance")(analysis, None, 9)


# -- which models ---------------------------------------------------------------------------------


def test_gradient_methods_need_a_head():
    a = make_analysis(1, num_classes=0)
    names = {m.name for m in methods_for(a)}
    assert names >= {"attention", "rollout", "dino-masks", "random"}
    assert not names & {m.name for m in all_methods() if m.needs_head}
    with pytest.raises(ValueError, match="needs a classification head, and this model has none"):
        get_method("grad-sam")(a)


def test_methods_declare_the_model_kinds_they_apply_to(analysis):
    assert model_kind(analysis.loaded.model) == "vit"

    class Other:
        model_kind = "swin"

    assert model_kind(Other()) == "swin"
    swin_only = Method("swin-only", "Swin only", _toy, applies_to=frozenset({"swin"}))
    assert "applies to swin models, not to this vit model" in swin_only.unavailable(analysis)
    with pytest.raises(ValueError, match="applies to swin"):
        swin_only(analysis)


# -- every method: shape, dtype, scaling -----------------------------------------------------


@pytest.mark.parametrize("name", [n for n in BUILTIN if get_method(n).map_kind == "scalar"])
def test_every_method_gives_a_grid_map_scaled_as_declared(analysis, name):  # pca: test_features
    method = get_method(name)
    classes = range(analysis.logits.numel()) if method.needs_head else [None]
    maps = {c: method(analysis, None, c) for c in classes}
    for out in maps.values():
        assert out.shape == GRID and out.dtype == torch.float32 and out.device.type == "cpu"
        assert torch.isfinite(out).all()
        if method.scaling == "max":
            assert abs(float(out.max()) - 1.0) < 1e-6 and float(out.min()) >= 0
        elif method.scaling == "min-max":  # [0, 1], or all zero where a ReLU left nothing
            assert float(out.min()) == 0.0
            assert abs(float(out.max()) - 1.0) < 1e-6 or float(out.max()) == 0.0
        elif method.scaling == "share":
            assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
    assert any(float(m.max()) > 0 for m in maps.values())
    if method.queries:  # a clicked patch changes the map (for some class at least)
        moved = [not torch.allclose(method(analysis, (2, 4), c), m) for c, m in maps.items()]
        assert any(moved), f"{name} ignores the query"


# -- the wrapped methods are the Analysis' own -----------------------------------------------


def test_wrapped_methods_are_the_analysis_maps(analysis):
    a, q = analysis, (1, 3)
    att = get_method("attention")
    assert torch.equal(att(a, q, params={"layer": 0, "head": 1}), a.attention_maps(0, q)[1])
    assert torch.equal(att(a, q), a.attention_maps(-1, q).mean(dim=0))
    got = get_method("rollout")(
        a, q, params={"fusion": "max", "discard_ratio": 0.3, "start_layer": 1}
    )
    assert torch.equal(got, a.rollout(q, "max", None, 0.3, 1))
    got = get_method("gradient-rollout")(a, q, 2, {"discard_ratio": 0.2, "start_layer": 1})
    assert torch.equal(got, a.gradient_rollout(2, q, 0.2, 1))
    assert torch.equal(get_method("relevance")(a, q, 3, {"start_layer": 1}), a.relevance(3, q, 1))
    masks = a.dino_masks(0, 0.4, q).float()
    dino = get_method("dino-masks")
    assert torch.equal(dino(a, q, params={"layer": 0, "threshold": 0.4, "head": 0}), masks[0])
    assert torch.equal(dino(a, q, params={"layer": 0, "threshold": 0.4}), masks.mean(dim=0))


def test_transformer_attribution_entry_is_the_lrp_map(analysis):
    a = analysis
    model = a.loaded.model
    for c, q in ((None, None), (1, None), (1, (2, 2))):
        got = get_method("transformer-attribution")(a, q, c, {"start_layer": 1})
        ref = transformer_attribution(model, a.input[None], c, start_layer=1, patch=q)[0]
        assert torch.allclose(got, ref, atol=1e-6)


def test_random_map_is_seeded_and_uniform():
    a = random_map((7, 9), seed=3)
    assert a.shape == (7, 9) and a.dtype == torch.float32
    assert torch.equal(a, random_map((7, 9), seed=3))
    assert not torch.equal(a, random_map((7, 9), seed=4))
    big = random_map((100, 100), seed=0)
    assert float(big.min()) >= 0.0 and float(big.max()) < 1.0
    assert abs(float(big.mean()) - 0.5) < 0.02  # uniform: mean 1/2, variance 1/12
    assert abs(float(big.var()) - 1 / 12) < 0.005


# -- float64 references written from the definitions -----------------------------------------


def random_attention(num_prefix, L=3, H=2, seed=0):
    N = num_prefix + GRID[0] * GRID[1]
    g = torch.Generator().manual_seed(seed)
    attn = [
        torch.softmax(2 * torch.randn(2, H, N, N, generator=g, dtype=torch.float64), -1)
        for _ in range(L)
    ]
    grads = [torch.randn(2, H, N, N, generator=g, dtype=torch.float64) for _ in range(L)]
    return attn, grads


def query_rows(num_prefix, N, query):
    return list(range(num_prefix, N)) if query is None else [query]


def ref_min_max(values):
    """(v − min) / (max − min); a constant map becomes all zero."""
    lo, hi = min(values), max(values)
    return [(v - lo) / (hi - lo) if hi > lo else 0.0 for v in values]


def as_grid(values):
    gh, gw = GRID
    return torch.tensor(
        [[values[r * gw + c] for c in range(gw)] for r in range(gh)], dtype=torch.float64
    )


def ref_grad_sam(A, G, num_prefix, query):
    """mean over l, h of (ReLU(G) ⊙ A)[q, patches], min-max: one image, nested lists."""
    L, H, N = len(A), len(A[0]), len(A[0][0])
    rows = query_rows(num_prefix, N, query)
    out = []
    for j in range(num_prefix, N):
        total = 0.0
        for layer in range(L):
            for h in range(H):
                a, g = A[layer][h], G[layer][h]
                total += sum(max(0.0, g[i][j]) * a[i][j] for i in rows) / len(rows)
        out.append(total / (L * H))
    return as_grid(ref_min_max(out))


def ref_attention_gradcam(A, G, num_prefix, query):
    """Last layer: ReLU(mean_h A[h, q, patches] · mean over patches of G[h, q, patches])."""
    H, N = len(A), len(A[0])
    rows = query_rows(num_prefix, N, query)
    patches = range(num_prefix, N)
    a = [[sum(A[h][i][j] for i in rows) / len(rows) for j in patches] for h in range(H)]
    g = [[sum(G[h][i][j] for i in rows) / len(rows) for j in patches] for h in range(H)]
    w = [sum(g[h]) / len(g[h]) for h in range(H)]
    cam = [max(0.0, sum(a[h][p] * w[h] for h in range(H)) / H) for p in range(len(patches))]
    return as_grid(ref_min_max(cam))


@pytest.mark.parametrize(("num_prefix", "query"), [(1, 0), (3, 0), (1, 7), (0, None), (2, None)])
def test_grad_sam_matches_the_loop(num_prefix, query):
    attn, grads = random_attention(num_prefix, seed=num_prefix)
    got = grad_sam(attn, grads, GRID, num_prefix, query)
    assert got.shape == (2, *GRID)
    for b in range(2):
        ref = ref_grad_sam(
            [a[b].tolist() for a in attn], [g[b].tolist() for g in grads], num_prefix, query
        )
        assert torch.allclose(got[b], ref, atol=1e-12)
    # ReLU on the gradient, not on the product: the other order gives another map
    wrong = grad_sam([-a for a in attn], [-g for g in grads], GRID, num_prefix, query)
    assert not torch.allclose(wrong, got)


@pytest.mark.parametrize(("num_prefix", "query"), [(1, 0), (3, 0), (1, 7), (0, None)])
def test_attention_gradcam_matches_the_loop(num_prefix, query):
    attn, grads = random_attention(num_prefix, L=1, H=3, seed=10 + num_prefix)
    got = attention_gradcam(attn[0], grads[0], GRID, num_prefix, query)
    for b in range(2):
        ref = ref_attention_gradcam(attn[0][b].tolist(), grads[0][b].tolist(), num_prefix, query)
        assert torch.allclose(got[b], ref, atol=1e-12)
    assert float(got.amax()) == 1.0  # not only all-zero maps


def test_grad_sam_and_attention_gradcam_entries_use_the_analysis_gradients(analysis):
    a, c = analysis, 2
    A = [layer.tolist() for layer in a.attention]
    G = [g[0].tolist() for g in a.gradients(c)]
    P = a.num_prefix_tokens
    for q, token in ((None, 0), ((1, 2), a.query_token((1, 2)))):
        got = get_method("grad-sam")(a, q, c)
        assert torch.allclose(got.double(), ref_grad_sam(A, G, P, token), atol=1e-5)
        got = get_method("attention-gradcam")(a, q, c)
        assert torch.allclose(
            got.double(), ref_attention_gradcam(A[-1], G[-1], P, token), atol=1e-5
        )


def norm1_features_and_gradients(model, x, c):
    """The last block's norm1 output F (N, D) and ∂y_c/∂F, by running the model by hand."""
    tokens, _ = model.embed(x)
    for block in model.blocks[:-1]:
        tokens, _ = block(tokens)
    tokens = tokens.detach()
    last = model.blocks[-1]
    with torch.enable_grad():
        f = last.norm1(tokens).detach().requires_grad_(True)
        y, _ = last.attn(f)
        mid = tokens + last.ls1(y)
        out = mid + last.ls2(last.mlp(last.norm2(mid)))
        logits = model.forward_head(model.norm(out))
        (g,) = torch.autograd.grad(logits[0, c], f)
    return f[0].detach().tolist(), g[0].tolist(), logits[0].detach()  # logits: a check


@pytest.mark.parametrize(
    ("seed", "options"), [(3, dict()), (0, dict(num_register_tokens=2, layer_scale_init=0.5))]
)
def test_token_gradcam_matches_the_loop_on_a_non_square_grid(seed, options):
    """(seed 0: the registers take attention, so their gradients are not negligible)"""
    model = random_vit(seed, image_size=(24, 40), **options).double()
    x = torch.randn(1, 3, 24, 40, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    P = model.num_prefix_tokens
    for c in (None, 4):
        got = token_gradcam(model, x, c)
        assert got.shape == (1, *GRID)
        cls = int(model(x)[0].argmax()) if c is None else c
        F, G, _ = norm1_features_and_gradients(model, x, cls)
        patches = range(P, len(F))
        D = len(F[0])
        w = [sum(G[p][d] for p in patches) / len(patches) for d in range(D)]
        cam = [max(0.0, sum(w[d] * F[p][d] for d in range(D))) for p in patches]
        assert torch.allclose(got[0], as_grid(ref_min_max(cam)), atol=1e-10)


def test_gradcam_entry_uses_the_models_grid(analysis):
    got = get_method("gradcam")(analysis, None, 1)
    ref = token_gradcam(analysis.loaded.model, analysis.input[None], 1)[0]
    assert got.shape == GRID
    assert torch.allclose(got, ref, atol=1e-6)
