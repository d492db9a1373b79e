"""capture_attention on its own: what is recorded, what is not, outputs unchanged, nothing left."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_modelcode_layouts import LAYOUT_IDS, LAYOUTS, sample_input, write_model
from torch import nn

from vitviz.modelcode import capture_attention, load_model_code, make_spec

REPO = Path(__file__).resolve().parents[2]
ORIGINAL_SDPA = F.scaled_dot_product_attention
ORIGINAL_MHA = F.multi_head_attention_forward


def scores(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 2


def test_every_softmax_spelling_is_recorded_over_the_last_axis():
    s = scores(2, 3, 5, 5)
    with capture_attention(batch=2) as log:
        outs = [
            s.softmax(dim=-1),
            torch.softmax(s, -1),
            F.softmax(s, dim=3),
            nn.Softmax(dim=-1)(s),
            torch.special.softmax(s, -1),
        ]
    assert log.softmax_calls == 5 and len(log.attentions) == 5
    for out, a in zip(outs, log.attentions, strict=True):
        assert a is out and a.shape == (2, 3, 5, 5)
        torch.testing.assert_close(a, torch.softmax(s, -1))


def test_softmax_that_is_not_square_attention_is_not_recorded():
    with capture_attention(batch=2) as log:
        s4 = scores(2, 3, 5, 5)
        s4.softmax(dim=1)  # not the last axis
        scores(2, 3, 5, 7).softmax(-1)  # not square (cross-attention, class attention)
        scores(2, 10).softmax(-1)  # logits
        scores(3, 3, 5, 5).softmax(-1)  # rank 4 whose batch is not B
        scores(7, 5, 5).softmax(-1)  # (B·H, N, N) with B·H not a multiple of B
    assert log.attentions == [] and log.softmax_calls == 5
    assert (2, 3, 5, 7) in log.other_shapes and (2, 10) in log.other_shapes
    assert "5 softmax" in log.summary()


def test_batch_times_heads_softmax_is_split_into_heads_and_stays_on_the_path():
    q = scores(2 * 3, 5, 4, seed=1).requires_grad_(True)
    with capture_attention(batch=2) as log:
        p = F.softmax(torch.bmm(q, q.transpose(1, 2)), dim=-1)  # (B·H, N, N)
        y = torch.bmm(p, q).square().sum()
    (a,) = log.attentions
    assert a.shape == (2, 3, 5, 5)
    torch.testing.assert_close(a.flatten(0, 1), torch.softmax(q @ q.transpose(1, 2), -1))
    (g,) = torch.autograd.grad(y, [a])  # the recorded tensor is the one the model used
    assert g.shape == (2, 3, 5, 5) and float(g.abs().max()) > 0


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"is_causal": True}, {"scale": 0.3}, {"mask": "float"}, {"mask": "bool"}],
    ids=["plain", "causal", "scale", "float_mask", "bool_mask"],
)
def test_sdpa_is_computed_explicitly_with_the_same_output(kwargs):
    q, k, v = (scores(2, 3, 6, 4, seed=i) for i in range(3))
    kw = dict(kwargs)
    mask = kw.pop("mask", None)
    if mask == "float":
        kw["attn_mask"] = scores(6, 6, seed=9)
    elif mask == "bool":
        kw["attn_mask"] = torch.rand(6, 6, generator=torch.Generator().manual_seed(3)) > 0.3
        kw["attn_mask"] |= torch.eye(6, dtype=torch.bool)
    want = F.scaled_dot_product_attention(q, k, v, **kw)
    with capture_attention(batch=2) as log:
        got = F.scaled_dot_product_attention(q, k, v, **kw)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    (a,) = log.attentions
    assert a.shape == (2, 3, 6, 6) and log.sdpa_calls == 1
    torch.testing.assert_close(a @ v, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.sum(-1), torch.ones(2, 3, 6))


def test_sdpa_cross_attention_is_passed_through():
    q, k = scores(1, 2, 3, 4), scores(1, 2, 7, 4, seed=1)
    with capture_attention(batch=1) as log:
        out = F.scaled_dot_product_attention(q, k, k)
    assert log.attentions == [] and log.sdpa_calls == 1
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, k))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_multihead_attention_gives_its_caller_what_it_asked_for(batch_first, need_weights, average):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=batch_first).eval()
    x = scores(1, 5, 8) if batch_first else scores(5, 1, 8)
    with torch.no_grad():
        want_out, _ = mha(x, x, x, need_weights=False)
        _, per_head = mha(x, x, x, need_weights=True, average_attn_weights=False)
        with capture_attention(batch=1) as log:
            out, w = mha(x, x, x, need_weights=need_weights, average_attn_weights=average)
    torch.testing.assert_close(out, want_out, atol=1e-6, rtol=1e-5)
    if not need_weights:
        assert w is None
    else:
        torch.testing.assert_close(w, per_head.mean(1) if average else per_head)
    (a,) = log.attentions
    torch.testing.assert_close(a, per_head)
    assert log.mha_calls == 1 and log.sources == ["multihead_attention"]


def test_unbatched_multihead_attention_is_recorded_with_a_batch_axis():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 4).eval()
    x = scores(5, 8)
    with torch.no_grad(), capture_attention(batch=1) as log:
        out, w = mha(x, x, x)
    assert out.shape == (5, 8) and w.shape == (5, 5)
    assert log.attentions[0].shape == (1, 4, 5, 5)


# -- scoped: nothing is left behind -----------------------------------------------------------


def _nothing_left(model: nn.Module) -> None:
    assert F.scaled_dot_product_attention is ORIGINAL_SDPA
    assert F.multi_head_attention_forward is ORIGINAL_MHA
    assert not torch._C._is_torch_function_mode_enabled()
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks, type(m).__name__


@pytest.mark.parametrize("fastpath", [True, False])
def test_nothing_is_left_after_a_captured_forward(tmp_path, fastpath):
    written = write_model(LAYOUTS[LAYOUT_IDS.index("encoder_batch_first")], tmp_path)
    lay = written.layout
    loaded = load_model_code(make_spec(written.file, lay.name, lay.args, written.weights))
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(fastpath)
    try:
        loaded.model.forward_explained(sample_input(), hidden_states=True)
        assert torch.backends.mha.get_fastpath_enabled() is fastpath
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)
    _nothing_left(loaded.model)


class _Fails(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        x = self.blocks[0](x)
        x.softmax(-1)
        raise RuntimeError("the user's forward broke")


def test_everything_is_restored_when_the_forward_raises():
    from vitviz.modelcode.adapter import run_captured

    model = _Fails()
    with pytest.raises(RuntimeError, match="broke"):
        run_captured(model, torch.zeros(1, 3, 4), hidden_states=True)
    assert torch.backends.mha.get_fastpath_enabled()
    _nothing_left(model)


def test_capture_is_local_to_the_thread_that_asked():
    seen_elsewhere = []

    def other():
        s = scores(1, 2, 3, 3)
        seen_elsewhere.append(torch._C._is_torch_function_mode_enabled())
        s.softmax(-1)

    with capture_attention(batch=1) as log:
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen_elsewhere == [False] and log.attentions == []


def test_explicit_probabilities_match_the_definition():
    q, k = scores(1, 2, 4, 8), scores(1, 2, 4, 8, seed=1)
    with capture_attention(batch=1) as log:
        F.scaled_dot_product_attention(q, k, k)
    want = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    torch.testing.assert_close(log.attentions[0], want)


def test_the_package_imports_no_qt_and_no_torch_until_used():
    script = (
        "import sys, json, vitviz.modelcode as m\n"
        "before = 'torch' in sys.modules\n"
        "m.load_model_code\n"
        "qt = sorted(k for k in sys.modules if k.split('.')[0] in ('PySide6', 'pyqtgraph'))\n"
        "print(json.dumps([before, 'torch' in sys.modules, qt]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout) == [False, True, []]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("key", ["multihead", "encoder_batch_first", "deit_distilled", "sdpa"])
def test_capture_on_cuda_matches_the_cpu(key, tmp_path, photo_files):
    from vitviz.pipeline.analysis import analyze

    lay = LAYOUTS[LAYOUT_IDS.index(key)]
    written = write_model(lay, tmp_path)
    spec = make_spec(written.file, lay.name, lay.args, written.weights, lay.settings)
    cpu = analyze(load_model_code(spec), photo_files["chelsea"])
    gpu = analyze(load_model_code(spec), photo_files["chelsea"], device="cuda")
    assert gpu.device.startswith("cuda")
    torch.testing.assert_close(gpu.attention.cpu(), cpu.attention, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(gpu.logits, cpu.logits, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(gpu.relevance(), cpu.relevance(), atol=1e-3, rtol=1e-3)
