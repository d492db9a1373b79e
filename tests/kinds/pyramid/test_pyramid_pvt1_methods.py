"""A transformers PVT v1's maps equal float64 references written from DESIGN §5 with
transformers' own attention and gradients: its last stage carries a CLS token first; the rollouts
start from it (no query: what the head reads) or from a grid token, run over [CLS, grid] there,
drop the CLS's entry at the stage's entry and go on over the grids; the attention map is a grid
query's row (or the CLS's) over the grid's keys; the head statistics' prefix share is the grid
queries' mean share on the CLS key."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_pyramid_hf_pvt1 import saved_pvt1

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import kind_of
from vitviz.kinds.pyramid.analysis import analyze_pyramid

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def pvt1(tmp_path_factory):
    model, folder = saved_pvt1(tmp_path_factory.mktemp("pvt1") / "pvt", "PvtForImageClassification")
    return model, load_checkpoint(folder)


def _reference(model, x):
    """transformers' logits, attentions and ∂y_c/∂A for its top class c."""
    out = model(pixel_values=x, output_attentions=True)
    c = int(out.logits[0].argmax())
    grads = torch.autograd.grad(out.logits[0, c], out.attentions)
    return [a[0].detach() for a in out.attentions], [g[0] for g in grads], c


def _blocks(n: int, size: int) -> np.ndarray:
    """(size // n, size): row i spreads evenly over fine rows i·n .. i·n + n."""
    out = np.zeros((size // n, size))
    for i in range(size // n):
        out[i, i * n : i * n + n] = 1.0 / n
    return out


def _square(n: int, side: int) -> np.ndarray:
    """The (coarse × fine) spread of n × n squares over a side × side grid."""
    return np.kron(_blocks(n, side), _blocks(n, side))


GRIDS = [16, 8, 4, 2]  # 64 px: stem stride 4, then 2, 2, 2
STAGES = [0, 1, 1, 2, 3, 3]
SR = [8, 4, 2, 1]


def _reference_row(mats, mode, start) -> np.ndarray:
    """start over [CLS, last grid] through every block back to the first stage's grid."""
    r = start
    current = 3
    for b in reversed(range(len(mats))):
        s = STAGES[b]
        while current > s:
            if current == 3:
                r = r[1:]  # the CLS entered as a parameter: its entry is dropped
            r = r @ _square(2, GRIDS[current - 1])
            current -= 1
        n = GRIDS[s]
        keys = np.eye(1 + n * n) if s == 3 else _square(SR[s], n)
        mixed = mats[b] @ keys
        if mode == "rollout":
            full = mixed + np.eye(len(r))
            r = r @ (full / full.sum(axis=1, keepdims=True))
        else:
            r = r @ (np.eye(len(r)) + mixed)
    return r


def test_rollouts_equal_their_definitions(pvt1) -> None:
    model, loaded = pvt1
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    attn, grads, c = _reference(model, x)
    a = analyze_pyramid(loaded, x[0], gradients=True)
    assert a.target_class == c and a.prefix == [0, 0, 0, 0, 1, 1]
    A = [t.double().numpy() for t in attn]
    G = [t.double().numpy() for t in grads]
    for mine, ref in zip(a.gradients, G, strict=True):
        np.testing.assert_allclose(mine.double().numpy(), ref, atol=1e-5 * max(abs(ref).max(), 1))
    cls_start = np.eye(5)[0]
    cell = (9, 4)  # its centre (38, 18) px lies in the last stage's token (1, 0): index 2
    one = np.eye(5)[1 + 2]
    pairs = list(zip(A, G, strict=True))
    defs = {
        "rollout": ([t.mean(axis=0) for t in A], "rollout"),
        "gradient-rollout": ([(t * g).mean(0).clip(0) for t, g in pairs], "rollout"),
        "relevance": ([(g * t).clip(0).mean(0) for t, g in pairs], "relevance"),
    }
    for name, (mats, mode) in defs.items():
        for query, start in ((None, cls_start), (cell, one)):
            row = _reference_row(mats, mode, start)
            if mode == "relevance":
                row = row - row.min()
            expected = (row / row.max()).reshape(16, 16)
            got = get_method(name)(a, query, None, {}).numpy()
            np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=f"{name} {query}")


def test_attention_rows_and_statistics(pvt1) -> None:
    model, loaded = pvt1
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(6))
    attn, _, _ = _reference(model, x)
    a = analyze_pyramid(loaded, x[0])
    cell = (13, 6)  # centre (54, 26) px
    for b, s in enumerate(STAGES):
        n, px = GRIDS[s], 4 * 2**s
        token = (54 // px) * n + 26 // px
        A = attn[b].double().numpy()
        P = int(s == 3)
        keys = np.eye(n * n) if s == 3 else _square(SR[s], n)
        for head in (-1, 0):
            picked = A.mean(axis=0) if head == -1 else A[head]
            got = get_method("attention")(a, cell, None, {"layer": b, "head": head}).numpy()
            want = (picked[P + token, P:] @ keys).reshape(n, n)
            np.testing.assert_allclose(got, want, atol=1e-6)
        none = get_method("attention")(a, None, None, {"layer": b}).numpy()
        row = A.mean(axis=0)[0, 1:] if P else A.mean(axis=0).mean(axis=0)  # the CLS's row
        np.testing.assert_allclose(none, (row @ keys).reshape(n, n), atol=1e-6)
    stats = kind_of(a).head_statistics(a)
    share = np.stack([attn[b][:, 1:, 0].double().mean(dim=-1).numpy() for b in (4, 5)])
    np.testing.assert_allclose(stats["prefix_share"][4:], share, atol=1e-6)
    assert np.isnan(stats["prefix_share"][:4]).all()
    rows = attn[5][:, 1:].double()
    entropy = -(rows * rows.log()).sum(-1).mean(-1).numpy()
    np.testing.assert_allclose(stats["entropy"][5], entropy, atol=1e-5)
    geometry = kind_of(a).token_geometry(a)
    assert [g.num_prefix_tokens for g in geometry.layers] == [0, 0, 0, 0, 1, 1]
    assert kind_of(a).npz_arrays(a)["block_prefix"].tolist() == [0, 0, 0, 0, 1, 1]


def test_the_query_without_a_click_is_named_the_cls(pvt1) -> None:
    _, loaded = pvt1
    a = analyze_pyramid(loaded, torch.zeros(3, 64, 64))
    words = kind_of(a).view_words(a)
    assert words.query_none.startswith("CLS token") and "CLS" in words.title_query_none
    assert words.method_query_none.startswith("from the CLS token")


def test_the_head_grid_picture_names_the_cls_query(pvt1, monkeypatch) -> None:
    """The exported head grid's title says the query the thumbnails are: a PVT v1's last-stage
    CLS token, not a mean over the tokens."""
    from types import SimpleNamespace

    from vitviz.pipeline import export

    _, loaded = pvt1
    a = analyze_pyramid(loaded, torch.zeros(3, 64, 64))
    kind = kind_of(a)
    titles: list[str] = []
    monkeypatch.setattr(export, "heads_figure", lambda *args, **kw: titles.append(kw["query"]))
    session = SimpleNamespace(loaded=loaded, analysis=a, kind=kind)
    kind.view_heads_picture(session, None, "inferno", 0.5, False)
    assert titles == [kind.view_words(a).title_query_none] and "CLS" in titles[0], titles
    kind.view_heads_picture(session, (1, 2), "inferno", 0.5, False)
    assert titles[1] == "query cell (1, 2)"
