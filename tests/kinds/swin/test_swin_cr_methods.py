"""Every method the Swin kind claims, on a SwinV2-CR, against its definition (DESIGN §5) with
timm's own attention, gradients and features as the input, in float64 loops: a block's
attention map (the query's row of Â_b), Â_b·V is timm's windowed attention on a padded shifted
map, the windowed rollout and gradient rollout, Grad-CAM over the last block's output (its ``auto``:
the block is post-norm) and over its norm1 when named."""

from __future__ import annotations

import pytest
import torch
from swin_helpers import tiny_timm_swin_cr
from test_swin_explain import _mix, _reference_dense, _reference_rollout
from test_swin_timm_cr import sharpen_
from timm.models import save_for_hf
from zoo_helpers import images, max_diff

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.attention import image_attention
from vitviz.kinds.swin.methods import attention_map, swin_method_map

SIZE = (60, 52)  # 15 × 13 rolled, then padded to 16 × 16; stage 1 8 × 7 -> 8 × 8


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    """(timm's SwinV2-CR with _ns_ extra norms, vitviz's reading of its folder)."""
    ref = sharpen_(tiny_timm_swin_cr(SIZE, name="swinv2_cr_tiny_ns_224", seed=11))
    folder = tmp_path_factory.mktemp("cr") / "cr"
    save_for_hf(ref, folder)
    return ref, load_checkpoint(folder)


def _blocks(ref):
    return [b for stage in ref.stages for b in stage.blocks]


def timm_attention_and_gradients(ref, x, target: int):
    """timm's probabilities of every block (windows, heads, n, n) and the gradients of logit
    ``target`` with respect to them."""
    kept = []

    def keep(_m, _i, out):
        out.retain_grad()
        kept.append(out)

    handles = [b.attn.attn_drop.register_forward_hook(keep) for b in _blocks(ref)]
    try:
        logits = ref(x)
        logits[0, target].backward()
    finally:
        for h in handles:
            h.remove()
    return [a.detach() for a in kept], [a.grad for a in kept]


def _place(layout):
    """(window, slot) of every grid token: padded after the roll (timm's order)."""
    H, W = layout.grid
    Wp = layout.padded[1]
    wh, ww = layout.window
    out = []
    for i in range(H * W):
        y, x = divmod(i, W)
        py, px = (y - layout.shift[0]) % H, (x - layout.shift[1]) % W
        out.append(((py // wh) * (Wp // ww) + px // ww, (py % wh) * ww + px % ww))
    return out


def test_attention_maps_are_rows_of_timms_attention(opened):
    ref, loaded = opened
    x = images(1, *SIZE)
    result = analyze_swin(loaded, x[0])
    attn, _ = timm_attention_and_gradients(ref, x, 0)
    for b in (1, 3):  # shifted blocks of both stages
        layout = result.layouts[b]
        assert layout.shifted
        dense = _reference_dense(attn[b], layout)  # heads × N × N in float64
        for token in (0, 7, layout.grid[0] * layout.grid[1] - 1):
            for head in (-1, 1):
                rows = [dense[h][token] for h in range(len(dense))]
                want = [sum(r[j] for r in rows) / len(rows) for j in range(len(rows[0]))]
                want = want if head == -1 else rows[head]
                got = attention_map(result, b, head, token).flatten()
                assert max_diff(got, torch.tensor(want, dtype=torch.float64)) < 1e-5


def test_attention_times_values_is_timms_windowed_attention(opened):
    """With q/k/v biases zero a padding token's value is 0, so timm's block output is Â_b·V
    with the captured weights as they are: the mapping holds on a padded, shifted map."""
    ref, loaded = opened
    blocks = _blocks(ref)
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    with torch.no_grad():
        for block in blocks:
            block.attn.qkv.bias.zero_()
    try:
        x = images(1, *SIZE)
        inputs = []
        handles = [b.register_forward_pre_hook(lambda _m, a: inputs.append(a[0])) for b in blocks]
        with torch.no_grad():
            ref(x)
        for h in handles:
            h.remove()
        loaded.model.load_state_dict(
            {**loaded.model.state_dict(), **_zero_qkv_biases(loaded.model)}
        )
        result = analyze_swin(loaded, x[0])
        for b, (block, X) in enumerate(zip(blocks, inputs, strict=True)):
            with torch.no_grad():
                lib = block._shifted_window_attn(X)
            dense = image_attention(result.attentions[b], result.layouts[b], renormalise=False)
            mine = _mix(dense, X[0], block.attn.qkv, block.attn.proj, block.attn.num_heads)
            assert max_diff(mine, lib[0]) < 1e-5, f"block {b}"
    finally:
        ref.load_state_dict(state)
        loaded.model.load_state_dict(
            {**loaded.model.state_dict(), **_qkv_biases_from(ref, loaded.model)}
        )


def _zero_qkv_biases(model):
    return {k: torch.zeros_like(v) for k, v in model.state_dict().items() if k.endswith("qkv.bias")}


def _qkv_biases_from(ref, model):
    theirs = ref.state_dict()
    return {k: theirs[k] for k in model.state_dict() if k.endswith("qkv.bias")}


@pytest.mark.parametrize("query", [None, 5])
def test_rollouts_follow_the_definition_over_timms_attention(opened, query):
    ref, loaded = opened
    x = images(1, *SIZE)
    result = analyze_swin(loaded, x[0], gradients=True)
    attn, grads = timm_attention_and_gradients(ref, x, result.target_class)
    dense = [_reference_dense(a, lay) for a, lay in zip(attn, result.layouts, strict=True)]

    def mean_heads(b):
        A = dense[b]
        n = len(A[0])
        return [
            [sum(A[h][i][j] for h in range(len(A))) / len(A) for j in range(n)] for i in range(n)
        ]

    got = result.rollout(query=query).flatten()
    want = torch.tensor(_reference_rollout(result, mean_heads, query), dtype=torch.float64)
    assert max_diff(got, want) < 1e-5
    assert max_diff(got, torch.full_like(got, float(got.mean()))) > 0.05  # not a flat map

    places = [_place(lay) for lay in result.layouts]
    G = [g.double().tolist() for g in grads]

    def grad_matrix(b):
        A, place = dense[b], places[b]
        heads, N = len(A), len(A[0])
        out = []
        for i in range(N):
            row = []
            for j in range(N):
                (wi, si), (wj, sj) = place[i], place[j]
                total = 0.0
                if wi == wj:
                    total = sum(A[h][i][j] * G[b][wi][h][si][sj] for h in range(heads)) / heads
                row.append(max(total, 0.0))
            out.append(row)
        return out

    got = result.gradient_rollout(query=query).flatten()
    want = torch.tensor(_reference_rollout(result, grad_matrix, query), dtype=torch.float64)
    assert max_diff(got, want) < 1e-5


def _timm_gradcam(ref, x, module, target: int) -> torch.Tensor:
    """Grad-CAM on ``module``'s output (B, H, W, D) of timm's model, by hand in float64 loops:
    w_d = the mean over the grid of ∂y/∂F[·, d], ReLU(Σ_d w_d F[·, d]), min-max scaled."""
    kept = []
    handle = module.register_forward_hook(lambda _m, _i, o: kept.append(o))
    try:
        logits = ref(x)
    finally:
        handle.remove()
    (grads,) = torch.autograd.grad(logits[0, target], kept[0])
    F = kept[0][0].detach().double()  # (H_S, W_S, D)
    w = grads[0].double().mean(dim=(0, 1))
    H, W, D = F.shape
    cam = [[max(sum(float(F[y, x_, d] * w[d]) for d in range(D)), 0.0) for x_ in range(W)]
           for y in range(H)]  # fmt: skip
    lo, hi = min(map(min, cam)), max(map(max, cam))
    assert hi > lo, "a flat map: nothing to compare"
    return torch.tensor([[(v - lo) / (hi - lo) for v in row] for row in cam], dtype=torch.float64)


def test_gradcam_reads_timms_last_block_output_and_its_norm1_when_named(opened):
    """A SwinV2-CR block is post-norm (its norm1 normalises the attention's output), so
    Grad-CAM's ``auto`` reads the last block's output (after its extra norm3), and ``-1.norm1``
    that norm as the user named it (DESIGN §5)."""
    ref, loaded = opened
    x = images(1, *SIZE)
    result = analyze_swin(loaded, x[0])
    target = int(result.logits.argsort()[-3])  # not the top class
    last = _blocks(ref)[-1]
    for layer, module in (("auto", last), ("-1.output", last), ("-1.norm1", last.norm1)):
        want = _timm_gradcam(ref, x, module, target)
        got = swin_method_map(result, loaded.model, "gradcam", None, target, {"layer": layer})
        assert got.shape == want.shape, layer
        assert max_diff(got, want) < 1e-5, layer
