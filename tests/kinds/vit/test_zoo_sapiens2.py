"""timm's Sapiens2 (``vit_*_patch16_sapiens2``, timm's Eva): qk-norm (RmsNorm on each head's q
and k), separate q/k/v projections with biases, grouped-query attention in the middle blocks
(full attention in the first and last ``num_full_attn_blocks``), LayerScale on the attention
branch only, DINOv3's rotary positions (temperature 100, rotate-half), 8 registers, RmsNorm,
SwiGLU, CLS pooling. A tiny perturbed model (width 64, depth 4 with one full-attention block at
each end, 4 heads, 2 kv heads) as timm's folder, as a bare state dict under timm's names and
under Sapiens2's original (Meta) names: logits and attention against timm's eager forward; the
methods against float64 references on timm's own attention; broken files refused in one line.
The shared accessor tests (head effects, head replacement) run on it too."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_interventions_kinds import (  # noqa: F401 - collected here with this module's fixtures
    test_a_head_replaced_on_some_rows_leaves_the_others_as_they_compute,
    test_head_effects_equal_a_single_head_pass,
)
from zoo_helpers import (
    LOGIT_ATOL,
    assert_attention,
    assert_attribution_offered,
    assert_close,
    assert_timm_relevance_maps,
    images,
    ours,
    randomize_,
)
from zoo_helpers import timm_reference as reference

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.pipeline.analysis import analyze

timm = pytest.importorskip("timm")

NAME = "vit_base_patch16_sapiens2"
SIZE = 32  # a 4 × 4 grid of 8-pixel patches


def kv_heads() -> tuple[int, ...]:
    """timm's own rule (its _sapiens2_args) at depth 4, 4 heads, 2 kv heads, one full block at
    each end: (4, 2, 2, 4)."""
    from timm.models.eva import _sapiens2_args

    return tuple(_sapiens2_args(64, 4, 4, 2, num_full_attn_blocks=1)["num_kv_heads"])


def tiny(seed: int, num_classes: int = 3) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = timm.create_model(
        NAME, pretrained=False, img_size=SIZE, patch_size=8, embed_dim=64, depth=4,
        num_heads=4, num_kv_heads=kv_heads(), num_classes=num_classes,
    )  # fmt: skip
    return randomize_(model, seed=seed)


def meta_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """timm's Sapiens2 tensors under Sapiens2's original names (the inverse of timm's
    checkpoint_filter_fn, which the test checks), with the pretraining mask token."""

    def name(k: str) -> str:
        if k.startswith("blocks."):
            for t, m in ((".attn.q_proj.", ".attn.wq."), (".attn.k_proj.", ".attn.wk."),
                         (".attn.v_proj.", ".attn.wv."), (".gamma_1", ".attn.gamma.weight"),
                         (".mlp.fc1.", ".ffn.w12."), (".mlp.fc2.", ".ffn.w3."),
                         (".norm1.", ".ln1."), (".norm2.", ".ln2.")):  # fmt: skip
                k = k.replace(t, m)
            return k
        for t, m in (("reg_token", "storage_tokens"), ("norm.", "ln1."),
                     ("patch_embed.proj.", "patch_embed.projection.")):  # fmt: skip
            if k.startswith(t):
                return m + k[len(t) :]
        return k

    out = {name(k): v for k, v in state.items()}
    out["mask_token"] = torch.zeros(1, state["cls_token"].shape[-1])
    return out


def check_exact(model: torch.nn.Module, loaded, h: int = SIZE, w: int = SIZE) -> None:
    x = images(2, h, w, seed=h + w)
    ref_logits, ref_attn = reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL * float(ref_logits.abs().max()))
    assert_attention(ref_attn, attn)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny(seed=1)


@pytest.fixture(scope="module")
def loaded(model, tmp_path_factory):
    from timm.models import save_for_hf

    folder = tmp_path_factory.mktemp("sapiens2") / "s2"
    save_for_hf(model, folder, safe_serialization=True)
    return load_checkpoint(folder)


@pytest.fixture(scope="module")
def opened(loaded):
    """(loaded model, one input (C, H, W)), as the interventions' tests take it."""
    return loaded, torch.randn(3, SIZE, SIZE, generator=torch.Generator().manual_seed(9))


def test_the_folder_opens_exactly_with_every_part_read(model, loaded) -> None:
    cfg = loaded.config
    assert loaded.family == "timm-eva"
    assert kv_heads() == (4, 2, 2, 4) and model.blocks[1].attn.num_kv_heads == 2
    # timm's rotary coordinates are rescaled at random while training (rope_rescale_coords):
    # in eval they are not, which the comparisons below hold
    assert model.rope.aug_active and model.rope.rescale_coords and not model.training
    read = dict(qk_norm=True, norm="rmsnorm", kv_heads=(4, 2, 2, 4), layer_scale_mlp=False,
                rope="dinov3", rope_half=True, rope_temperature=100.0, num_register_tokens=8,
                swiglu=True, global_pool="token", qkv_bias=True, heads=4)  # fmt: skip
    for key, value in read.items():
        assert getattr(cfg, key) == value, key
    assert cfg.layer_scale_init is not None
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes
    check_exact(model, loaded)
    check_exact(model, loaded, 48, 32)  # another grid: the rotary formula, not a table


def test_a_bare_state_dict_named_with_arch_opens_exactly(model, tmp_path: Path) -> None:
    path = tmp_path / "s2.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, {"arch": NAME, "image_size": [SIZE, SIZE]})
    assert loaded.config.kv_heads == (4, 2, 2, 4) and loaded.config.heads == 4  # qk-norm's width
    assert any("key/value heads per block read from the tensors" in n for n in loaded.notes)
    # DESIGN §4, like with like: timm's model is built with what vitviz read (the name's own
    # kv heads are for depth 12 and full attention throughout)
    args = loaded.reference.model_args
    assert args["num_kv_heads"] == (4, 2, 2, 4) and args["depth"] == 4
    assert args["qk_norm"] is True and args["attn_only_layer_scale"] is True
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes
    check_exact(model, loaded)


def test_sapiens2s_original_names_open_exactly(model, tmp_path: Path) -> None:
    from timm.models.eva import checkpoint_filter_fn

    meta = meta_names(model.state_dict())
    back = checkpoint_filter_fn(dict(meta), model)  # the names are those timm's loading reads
    assert sorted(back) == sorted(model.state_dict())
    path = tmp_path / "sapiens2_meta.pth"
    torch.save(meta, path)
    loaded = load_checkpoint(path, {"arch": NAME, "image_size": [SIZE, SIZE]})
    assert any("original tensor names" in n for n in loaded.notes), loaded.notes
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes
    check_exact(model, loaded)


def _refusal(path: Path, settings: dict) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, settings)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_what_a_bare_file_does_not_say_is_asked_for_in_one_line(model, tmp_path: Path) -> None:
    path = tmp_path / "s2.pth"
    torch.save(model.state_dict(), path)
    assert "image_size" in _refusal(path, {"arch": NAME})
    assert "--arch" in _refusal(path, {})  # no timm name has a tiny model's tensors


@pytest.mark.parametrize("broken", ["missing-k", "odd-kv-rows", "k-without-norm"])
def test_a_broken_file_is_refused_in_one_line(model, tmp_path: Path, broken: str) -> None:
    state = dict(model.state_dict())
    if broken == "missing-k":
        del state["blocks.2.attn.k_proj.weight"]
        want = "k_proj"
    elif broken == "odd-kv-rows":  # 3 kv heads of width 16: they don't divide 4 heads
        for key in [k for k in state if k.startswith("blocks.0.attn.") and "_proj" in k]:
            state[key] = state[key][:48] if "q_proj" not in key else state[key]
        want = "kv_heads"
    else:
        del state["blocks.0.attn.q_norm.weight"]
        want = "qk-norm|q_norm"
    path = tmp_path / f"{broken}.pth"
    torch.save(state, path)
    assert __import__("re").search(want, _refusal(path, {"arch": NAME, "image_size": [32, 32]}))


@pytest.fixture(scope="module")
def analysis(model, tmp_path_factory, photo_files):
    """The folder opened at its model's 32 × 32 (timm's pretrained size is 1024 × 768)."""
    from timm.models import save_for_hf

    folder = tmp_path_factory.mktemp("sapiens2") / "s2"
    save_for_hf(model, folder, safe_serialization=True)
    opened = load_checkpoint(folder, {"preprocessing": {"image_size": [SIZE, SIZE]}})
    return analyze(opened, photo_files["chelsea"], gradients=True)


def test_relevance_and_gradient_rollout_against_float64_on_timms_attention(analysis) -> None:
    """Relevance and gradient rollout from their definitions (DESIGN §5) on timm's own
    grouped-query attention in float64, with its autograd; transformer attribution offered (its
    rules for grouped-query attention and qk-norm: test_explain_attribution_parts.py)."""
    model = tiny(seed=1)  # a fresh copy: the reference is made float64
    target = analysis.top_class
    assert_timm_relevance_maps(analysis, model, target, atol=1e-6)
    assert_attribution_offered(analysis, target)


def test_attention_and_rollout_against_float64_on_timms_attention(analysis) -> None:
    """Each query head's map is its row of softmax(q kᵀ) over the kv head it shares, as timm
    computes it (float64); rollout is the chain of rownorm(mean_h A + I) from CLS."""
    from vitviz.explain.methods import get_method

    model = tiny(seed=1).double()
    _logits, attn = reference(model, analysis.input[None].double())
    P = analysis.num_prefix_tokens
    assert P == 9
    for layer in (1, 3):  # a grouped-query block and a full one
        for head in range(4):
            got = get_method("attention")(analysis, None, None, {"layer": layer, "head": head})
            want = attn[layer][0, head, 0, P:].reshape(4, 4)
            assert torch.allclose(got.double() / got.double().max(), want / want.max(), atol=1e-5)
    eye = torch.eye(attn[0].shape[-1], dtype=torch.float64)
    chain = eye
    for a in attn:
        m = a[0].mean(0) + eye
        chain = (m / m.sum(-1, keepdim=True)) @ chain
    want = chain[0, P:].reshape(4, 4)
    torch.testing.assert_close(analysis.rollout().double(), want / want.max(), rtol=0, atol=1e-5)


def test_the_model_info_names_the_new_parts(loaded) -> None:
    from vitviz.blocks.parts import vit_parts

    parts = " / ".join(vit_parts(loaded.config))
    for word in ("qk-norm", "grouped-query in 2 of 4 blocks", "RMSNorm",
                 "LayerScale on the attention branch only", "8 registers"):  # fmt: skip
        assert word in parts, parts


def test_the_new_settings_are_checked_and_survive_a_json_round_trip() -> None:
    import json

    from vitviz.blocks import ViTConfig

    base = dict(image_size=32, patch_size=8, dim=64, depth=4, heads=4)
    cfg = ViTConfig(**base, kv_heads=[4, 2, 2, 4], layer_scale_init=1.0, layer_scale_mlp=False)
    back = ViTConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.kv_heads == (4, 2, 2, 4)
    for bad, words in (
        (dict(kv_heads=(4, 2)), "one entry per block"),
        (dict(kv_heads=(4, 3, 3, 4)), "must divide heads 4"),
        (dict(kv_heads=(4, 2, 2, 4), parallel=True), "takes no parallel"),
        (dict(layer_scale_mlp=False), "needs layer_scale_init"),
    ):
        with pytest.raises(ValueError, match=words):
            ViTConfig(**base, **bad)
