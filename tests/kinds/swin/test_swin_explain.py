"""Swin attention in image coordinates and the windowed rollouts, against their definitions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from loop_math import matmul
from swin_helpers import tiny_torchvision_swin
from zoo_helpers import images, max_diff

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.attention import image_attention, query_row


def _load(tmp_path, ref_model):
    path = tmp_path / "swin.pth"
    torch.save(ref_model.state_dict(), path)
    return load_checkpoint(path)


def _sharpen_(model, factor: float = 4.0):
    """Scale every block's qkv weights up: attention far from uniform."""
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.mul_(factor)
    return model


def test_attention_times_values_is_torchvision_block_output(tmp_path):
    """Â_b·V (heads concatenated, projected) equals torchvision's own windowed attention put back
    on the grid (un-shifted, un-padded by its code), W-MSA and SW-MSA blocks alike."""
    ref = tiny_torchvision_swin(window=4)
    loaded = _load(tmp_path, ref)
    x = images(1, 64, 64)
    inputs = []
    modules = [ref.features[1][0].attn, ref.features[1][1].attn]
    modules += [ref.features[3][0].attn, ref.features[3][1].attn]
    handles = [m.register_forward_pre_hook(lambda _m, a: inputs.append(a[0])) for m in modules]
    with torch.no_grad():
        ref(x)
    for h in handles:
        h.remove()
    result = analyze_swin(loaded, x[0])
    assert [lay.shifted for lay in result.layouts] == [False, True, False, True]
    for b, (module, X) in enumerate(zip(modules, inputs, strict=True)):
        layout = result.layouts[b]
        with torch.no_grad():
            lib = module(X)[0]  # (H, W, C) on the grid, by torchvision's code
        H, W, C = lib.shape
        heads = module.num_heads
        dense = image_attention(result.attentions[b], layout)  # (heads, N, N)
        qkv = F.linear(X[0].reshape(H * W, C), module.qkv.weight, module.qkv.bias)
        v = qkv[:, 2 * C :].reshape(H * W, heads, C // heads)
        mixed = torch.einsum("hij,jhd->ihd", dense, v).reshape(H * W, C)
        mine = F.linear(mixed, module.proj.weight, module.proj.bias).reshape(H, W, C)
        assert max_diff(mine, lib) < 1e-5, f"block {b}"


def test_query_row_is_the_dense_row_on_a_padded_shifted_map(tmp_path):
    loaded = _load(tmp_path, tiny_torchvision_swin(window=4))
    result = analyze_swin(loaded, images(1, 60, 52)[0])
    layout, attn = result.layouts[1], result.attentions[1]
    assert layout.shifted and layout.padded != layout.grid
    dense = image_attention(attn, layout)
    torch.testing.assert_close(dense.sum(-1), torch.ones(dense.shape[:2]))
    for token in range(0, layout.grid[0] * layout.grid[1], 7):
        torch.testing.assert_close(query_row(attn, layout, token), dense[:, token])


def _reference_dense(attn, layout) -> list[list[list[float]]]:
    """Â (heads × N × N) from the captured attention by the definition, in float64 loops."""
    H, W = layout.grid
    Hp, Wp = layout.padded
    wh, ww = layout.window
    sh, sw = layout.shift
    ry, rx = (H, W) if layout.shift_first else (Hp, Wp)
    A = attn.double().tolist()

    def where(i):
        y, x = divmod(i, W)
        py, px = (y - sh) % ry, (x - sw) % rx
        return (py // wh) * (Wp // ww) + px // ww, (py % wh) * ww + px % ww

    N = H * W
    place = [where(i) for i in range(N)]
    out = []
    for h in range(attn.shape[1]):
        rows = []
        for i in range(N):
            wi, si = place[i]
            row = [A[wi][h][si][place[j][1]] if place[j][0] == wi else 0.0 for j in range(N)]
            total = sum(row)
            rows.append([v / total for v in row])
        out.append(rows)
    return out


def _reference_rollout(result, blocks_matrix, query=None, query_stage=None) -> list[float]:
    """r over the first stage by the definition: dense float64 Ã_b and M_s, loops only."""
    grids = result.stage_grids
    start = len(grids) - 1 if query_stage is None else query_stage
    H, W = grids[start]
    N = H * W
    r = [[1.0 / N] * N] if query is None else [[1.0 if i == query else 0.0 for i in range(N)]]
    stages = result.block_stages
    for b in reversed(range(len(stages))):
        if stages[b] > start:
            continue
        if b + 1 < len(stages) and stages[b + 1] != stages[b] and stages[b + 1] <= start:
            (h0, w0), (h1, w1) = grids[stages[b]], grids[stages[b + 1]]
            M = [[0.0] * (h0 * w0) for _ in range(h1 * w1)]
            for y in range(h0):
                for x in range(w0):
                    M[(y // 2) * w1 + x // 2][y * w0 + x] = 0.25
            r = matmul(r, M)
        F_ = blocks_matrix(b)
        n = len(F_)
        tilde = []
        for i in range(n):
            row = [F_[i][j] + (1.0 if i == j else 0.0) for j in range(n)]
            total = sum(row)
            tilde.append([v / total for v in row])
        r = matmul(r, tilde)
    peak = max(r[0])
    return [v / peak for v in r[0]]


@pytest.mark.parametrize(("size", "query"), [((60, 52), None), ((64, 64), 5)])
def test_windowed_rollout_matches_the_definition(tmp_path, size, query):
    loaded = _load(tmp_path, tiny_torchvision_swin(window=4))
    _sharpen_(loaded.model)
    result = analyze_swin(loaded, images(1, *size)[0], gradients=True)
    peak = max(float(a.amax(-1).mean()) for a in result.attentions)
    assert peak > 0.6, "attention is not far from uniform"
    pairs = zip(result.attentions, result.layouts, strict=True)
    dense = [_reference_dense(a, lay) for a, lay in pairs]

    def mean_heads(b):
        A = dense[b]
        return [
            [sum(A[h][i][j] for h in range(len(A))) / len(A) for j in range(len(A[0]))]
            for i in range(len(A[0]))
        ]

    got = result.rollout(query=query).flatten()
    want = torch.tensor(_reference_rollout(result, mean_heads, query), dtype=torch.float64)
    assert max_diff(got, want) < 1e-5
    assert max_diff(got, torch.full_like(got, float(got.mean()))) > 0.05  # not a flat map

    grads = []
    for g, lay in zip(result.gradients, result.layouts, strict=True):
        H, W = lay.grid
        Hp, Wp = lay.padded
        G = g.double().tolist()
        wh, ww = lay.window
        place = []
        for i in range(H * W):
            y, x = divmod(i, W)
            py, px = (y - lay.shift[0]) % Hp, (x - lay.shift[1]) % Wp
            place.append(((py // wh) * (Wp // ww) + px // ww, (py % wh) * ww + px % ww))
        grads.append((G, place))

    def grad_matrix(b):
        A = dense[b]
        G, place = grads[b]
        heads, N = len(A), len(A[0])
        out = []
        for i in range(N):
            row = []
            for j in range(N):
                wi, si = place[i]
                wj, sj = place[j]
                total = 0.0
                if wi == wj:
                    total = sum(A[h][i][j] * G[wi][h][si][sj] for h in range(heads)) / heads
                row.append(max(total, 0.0))
            out.append(row)
        return out

    got_grad = result.gradient_rollout(query=query).flatten()
    want_grad = torch.tensor(_reference_rollout(result, grad_matrix, query), dtype=torch.float64)
    assert max_diff(got_grad, want_grad) < 1e-5


def _mix(dense, X, qkv: torch.nn.Linear, proj: torch.nn.Linear, heads: int):
    """proj(concat_h(Â[h]·V_h)) for a (H, W, C) block input X -> (H, W, C)."""
    H, W, C = X.shape
    v = F.linear(X.reshape(H * W, C), qkv.weight, qkv.bias)[:, 2 * C :]
    mixed = torch.einsum("hij,jhd->ihd", dense, v.reshape(H * W, heads, C // heads))
    return F.linear(mixed.reshape(H * W, C), proj.weight, proj.bias).reshape(H, W, C)


@pytest.mark.parametrize("library", ["torchvision", "timm"])
def test_mapping_on_padded_shifted_maps_against_the_library(tmp_path, library):
    """With q/k/v biases zero a padding token has value 0, so the library's block output is
    Â_b·V with the captured weights as they are (mass on padding left out): the mapping holds
    on padded maps, for padding after the roll (torchvision) and before it (timm)."""
    size = (60, 52)  # 15 × 13 -> padded to 16 × 16, shifted by 2; stage 1 8 × 7 -> 8 × 8
    if library == "torchvision":
        ref = tiny_torchvision_swin(window=4)
        blocks = [b for i in (1, 3) for b in ref.features[i]]
    else:
        from swin_helpers import tiny_timm_swin

        ref = tiny_timm_swin(size, window=4)
        blocks = [b for stage in ref.layers for b in stage.blocks]
    with torch.no_grad():
        for block in blocks:
            block.attn.qkv.bias.zero_()
    loaded = _load(tmp_path, ref)
    x = images(1, *size)
    inputs = []
    handles = [b.norm1.register_forward_hook(lambda _m, _i, o: inputs.append(o)) for b in blocks]
    with torch.no_grad():
        ref(x)
    for h in handles:
        h.remove()
    result = analyze_swin(loaded, x[0])
    assert result.layouts[1].shifted and result.layouts[1].padded != result.layouts[1].grid
    assert result.layouts[0].shift_first == (library == "timm")
    for b, (block, X) in enumerate(zip(blocks, inputs, strict=True)):
        with torch.no_grad():
            lib = block.attn(X) if library == "torchvision" else block._attn(X)
        dense = image_attention(result.attentions[b], result.layouts[b], renormalise=False)
        mine = _mix(dense, X[0], block.attn.qkv, block.attn.proj, block.attn.num_heads)
        assert max_diff(mine, lib[0]) < 1e-5, f"block {b}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_swin_analysis_on_cuda_matches_the_cpu(tmp_path):
    loaded = _load(tmp_path, tiny_torchvision_swin(window=4))
    x = images(1, 60, 52)[0]
    cpu = analyze_swin(loaded, x, gradients=True)
    loaded.model.to("cuda")
    gpu = analyze_swin(loaded, x, gradients=True)
    assert gpu.logits.device.type == "cuda"
    torch.testing.assert_close(gpu.logits.cpu(), cpu.logits, atol=1e-4, rtol=1e-3)
    for a, b in zip(gpu.attentions, cpu.attentions, strict=True):
        torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(gpu.rollout(query=3).cpu(), cpu.rollout(query=3), atol=1e-4, rtol=0)
    torch.testing.assert_close(
        gpu.gradient_rollout().cpu(), cpu.gradient_rollout(), atol=1e-3, rtol=1e-3
    )
    row = query_row(gpu.attentions[1], gpu.layouts[1], 10)
    torch.testing.assert_close(row.cpu(), query_row(cpu.attentions[1], cpu.layouts[1], 10))


def test_analysis_from_a_photo_uses_the_checkpoint_preprocessing(tmp_path):
    from PIL import Image

    loaded = _load(tmp_path, tiny_torchvision_swin(window=4))
    loaded.preprocessing = type(loaded.preprocessing).from_dict(
        {**loaded.preprocessing.to_dict(), "image_size": [64, 64]}
    )
    photo = Image.effect_mandelbrot((90, 70), (-2, -1.2, 1, 1.2), 60).convert("RGB")
    result = analyze_swin(loaded, photo)
    assert result.input is not None and result.input.shape == (3, 64, 64)
    assert result.pixels is not None and result.stage_grids == [(16, 16), (8, 8)]
    with torch.no_grad():
        direct = loaded.model(result.input[None])[0]
    assert max_diff(result.logits, direct) < 1e-5


@pytest.mark.parametrize(
    ("fusion", "heads", "query", "query_stage"),
    [("max", None, 9, None), ("min", None, None, None), ("mean", [1], 40, 0)],
)
def test_rollout_fusions_heads_and_stage_queries(tmp_path, fusion, heads, query, query_stage):
    """Other head fusions, a subset of heads, and a query token of the first stage (only the
    first stage's blocks then), against the float64 loop of the definition."""
    loaded = _load(tmp_path, tiny_torchvision_swin(window=4))
    _sharpen_(loaded.model)
    result = analyze_swin(loaded, images(1, 60, 52)[0])
    pairs = zip(result.attentions, result.layouts, strict=True)
    dense = [_reference_dense(a, lay) for a, lay in pairs]
    pick = {"max": max, "min": min, "mean": lambda v: sum(v) / len(v)}[fusion]

    def fused(b):
        A = dense[b]
        chosen = range(len(A)) if heads is None else heads
        N = len(A[0])
        return [[pick([A[h][i][j] for h in chosen]) for j in range(N)] for i in range(N)]

    got = result.prepared_rollout(fusion, heads).map(query, query_stage).flatten()
    want = _reference_rollout(result, fused, query, query_stage)
    assert max_diff(got, torch.tensor(want, dtype=torch.float64)) < 1e-5


def test_window_of_a_query_on_the_image_wraps_with_the_shift(tmp_path):
    """The tokens sharing a query's window, by the definition (loops over the padded shifted
    map), and the token under a point at each block's resolution."""
    from vitviz.kinds.swin.attention import query_window, token_at, window_ids

    loaded = _load(tmp_path, tiny_torchvision_swin(window=4))
    result = analyze_swin(loaded, images(1, 60, 52)[0])
    layout = result.layouts[1]  # 15 × 13 padded to 16 × 16, shifted by 2
    H, W = layout.grid
    Hp, Wp = layout.padded

    def window_of(y, x):
        py, px = (y - 2) % Hp, (x - 2) % Wp
        return (py // 4) * (Wp // 4) + px // 4

    want = torch.tensor([[window_of(y, x) for x in range(W)] for y in range(H)])
    assert torch.equal(window_ids(layout), want)
    corner = query_window(layout, 0)  # token (0, 0) sits in the last window: it wraps around
    expected = torch.tensor(
        [[window_of(y, x) == window_of(0, 0) for x in range(W)] for y in range(H)]
    )
    assert torch.equal(corner, expected)
    assert int(corner.sum()) == 6 and bool(corner[-1, 0]) and bool(corner[1, 1])  # 3 × 2 pieces
    # the row of a query is zero exactly outside its window
    row = query_row(result.attentions[1], layout, 0).reshape(-1, H, W)
    assert bool((row[:, ~corner] == 0).all())
    torch.testing.assert_close(row[:, corner].sum(-1), torch.ones(row.shape[0]))
    assert token_at(result.layouts[0], 4, (59.0, 10.0)) == 14 * 13 + 2
    assert token_at(result.layouts[3], 8, (59.0, 51.0)) == 7 * 7 + 6
