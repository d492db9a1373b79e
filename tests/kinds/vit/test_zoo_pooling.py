"""timm ViTs with an attention-pooling head (MAP: ``global_pool='map'``, SigLIP's
``vit_*_siglip_*``, ``vit_so150m_patch16_reg4_map_256``): a learnt latent query attends to the
final tokens (q, kv, proj, norm, MLP, residual), vitviz's one ``AttentionPool``, the one the
CLIP kind's SigLIP uses. Logits and attention against timm's eager forward (bare and folder);
the maps without a query start from the probe's row: rollout, gradient rollout and relevance
against float64 references written from their definitions (DESIGN §5) with timm's autograd;
transformer attribution refused with the reason; the window's words name the probe."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf
from zoo_helpers import (
    LOGIT_ATOL,
    assert_attention,
    assert_attribution_offered,
    assert_close,
    assert_probe_maps,
    images,
    ours,
    randomize_,
)

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.kindapi import kind_of
from vitviz.pipeline.analysis import analyze

TINY = dict(pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
            num_classes=3)  # fmt: skip
CASES = {
    "siglip": ("vit_base_patch16_siglip_224", {}),
    "registers": ("vit_base_patch16_224", dict(global_pool="map", class_token=False, reg_tokens=2)),
    "cls+prefix": ("vit_base_patch16_224", dict(global_pool="map", pool_include_prefix=True)),
}
BARE = {"heads": 4, "activation": "gelu"}  # what a bare file of no timm name can't say


def tiny(name: str, seed: int = 0, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = timm.create_model(name, **{**TINY, **options})
    return randomize_(model, seed=seed).eval()


def _timm_attention_off(model: torch.nn.Module) -> None:
    for block in model.blocks:
        block.attn.fused_attn = False
    model.attn_pool.fused_attn = False


@pytest.mark.parametrize("case", list(CASES))
def test_a_map_head_opens_exactly_bare_and_folder(tmp_path: Path, case: str) -> None:
    from zoo_helpers import timm_reference

    name, options = CASES[case]
    model = tiny(name, **options)
    _timm_attention_off(model)
    save_for_hf(model, tmp_path / "folder", safe_serialization=True)
    torch.save(model.state_dict(), tmp_path / "bare.pth")
    x = images(2, 32, 32)
    ref_logits, ref_attn = timm_reference(model, x)
    bare = {**BARE, "pool_include_prefix": bool(options.get("pool_include_prefix"))}
    for path, settings in ((tmp_path / "folder", None), (tmp_path / "bare.pth", bare)):
        loaded = load_checkpoint(path, settings)
        assert loaded.config.global_pool == "map" and loaded.model.pool is not None
        assert "an attention-pooling probe" in " ".join(kind_of(loaded).parts(loaded.model))
        # a bare file's MAP head too: timm's VisionTransformer built with it (DESIGN §4)
        assert any(n.startswith("checked against timm") for n in loaded.notes), loaded.notes
        logits, attn = ours(loaded, x)
        assert_close("logits", ref_logits, logits, LOGIT_ATOL)
        assert_attention(ref_attn, attn)


def test_several_latent_queries_are_refused(tmp_path: Path) -> None:
    model = tiny("vit_base_patch16_siglip_224")
    state = model.state_dict()
    state["attn_pool.latent"] = state["attn_pool.latent"].repeat(1, 2, 1)
    torch.save(state, tmp_path / "two.pth")
    with pytest.raises(CheckpointError, match="2 latent queries"):
        load_checkpoint(tmp_path / "two.pth", BARE)


def _reference(model: torch.nn.Module, x: torch.Tensor, prefix: int, include: bool):
    """float64 pass of timm's model with the probe written out: (logits, [A_l], [G_l], A_p,
    G_p) for the top class; A_l, G_l (H, N, N), A_p, G_p (H, N) (zero on unread prefix)."""
    m = copy.deepcopy(model).double()
    _timm_attention_off(m)
    kept: list[torch.Tensor] = []

    def keep(_m, _i, out):
        out.retain_grad()
        kept.append(out)

    handles = [b.attn.attn_drop.register_forward_hook(keep) for b in m.blocks]
    tokens = m.forward_features(x.double())  # (1, N, D) after the final norm
    for h in handles:
        h.remove()
    pool = m.attn_pool
    xs = tokens if include else tokens[:, prefix:]
    B, n, D = xs.shape
    H, hd = pool.num_heads, D // pool.num_heads
    q = pool.q(pool.latent).reshape(1, H, 1, hd)
    k, v = pool.kv(xs).reshape(B, n, 2, H, hd).permute(2, 0, 3, 1, 4)
    a_p = ((q @ k.transpose(-2, -1)) * hd**-0.5).softmax(-1)  # (1, H, 1, n)
    a_p.retain_grad()
    h = pool.proj((a_p @ v).transpose(1, 2).reshape(1, 1, D))
    pooled = (h + pool.mlp(pool.norm(h)))[:, 0]
    logits = m.head(m.fc_norm(pooled))
    torch.testing.assert_close(logits, m(x.double()), rtol=1e-10, atol=1e-10)
    logits[0, int(logits.argmax())].backward()
    pad = tokens.shape[1] - n

    def full(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(t[0, :, 0], (pad, 0))

    return (
        logits.detach(),
        [a.detach()[0] for a in kept],
        [a.grad[0] for a in kept],
        full(a_p.detach()),
        full(a_p.grad),
    )


def _patches(r: torch.Tensor, prefix: int) -> torch.Tensor:
    return r[prefix:].reshape(4, 4)


@pytest.mark.parametrize("case", ["siglip", "registers"])
def test_the_maps_start_from_the_probe_row(tmp_path: Path, case: str, photo_files) -> None:
    name, options = CASES[case]
    model = tiny(name, seed=3, **options)
    save_for_hf(model, tmp_path / "folder", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "folder")
    a = analyze(loaded, photo_files["chelsea"])
    P = a.num_prefix_tokens
    logits, A, G, a_p, g_p = _reference(model, a.input[None], P, False)
    torch.testing.assert_close(a.logits.double(), logits[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a.probe_attention.double(), a_p, rtol=0, atol=1e-5)
    assert_probe_maps(a, A, G, a_p, g_p)

    # the last layer's raw map without a query is the probe's row
    maps = a.attention_maps(-1)
    torch.testing.assert_close(maps.double(), a_p[:, P:].reshape(4, 4, 4), rtol=0, atol=1e-5)

    assert_attribution_offered(a)


def test_the_window_names_the_probe(tmp_path: Path, photo_files) -> None:
    from vitviz.kinds.vit import engine_data

    model = tiny("vit_base_patch16_siglip_224", seed=2)
    save_for_hf(model, tmp_path / "folder", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "folder")
    a = analyze(loaded, photo_files["chelsea"])

    class Session:
        analysis = a
        kind = loaded.kind

    numbers = engine_data.image_numbers(Session())  # type: ignore[arg-type]
    assert numbers.words.query_none.startswith("attention-pool probe")
    assert numbers.words.title_query_none == "query: attention-pool probe"  # not "query CLS"
    assert numbers.words.query_reset == "Reset to the probe"
    plain = engine_data.words(0)  # a ViT without prefix tokens: its maps read the mean
    assert (plain.query_none, plain.title_query_none) == (
        "mean of patches",
        "query: mean of patches",
    )
    assert numbers.attention is None  # the probe's row comes from the engine, not the array
    head_maps, _, _ = a.host_query_maps(None)
    torch.testing.assert_close(
        torch.from_numpy(head_maps[-1]), a.attention_maps(-1), rtol=0, atol=1e-6
    )
