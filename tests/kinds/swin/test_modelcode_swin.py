"""A Swin written like the guides (tests/seed_swin_model.py) opened as model code: its window
attention against the modules run by hand, its rollout against a float64 loop of the definition
over the seed code's own partition, its logits against its own forward."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import save_file
from test_modelcode_models import assert_probabilities_close

from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.modelcode import SwinCodeModel, swin_code_model
from vitviz.modelcode import ModelCodeError, make_spec
from vitviz.modelcode.load import load_model_code

SEED_FILE = Path(__file__).resolve().parents[2] / "seed_swin_model.py"


def _seed_model(seed: int = 0):
    import importlib.util

    spec = importlib.util.spec_from_file_location("seed_swin_model_ref", SEED_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(seed)
    model = module.SwinTransformer().eval()
    with torch.no_grad():  # sharpen: attention far from uniform
        for name, p in model.named_parameters():
            if name.endswith("qkv.weight"):
                p.mul_(6.0)
            if name.endswith("relative_position_bias_table"):
                p.normal_(0, 1.0)
    return module, model


def _by_hand(module, model, x) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each WindowAttention's softmax computed by hand on its input, (windows, heads, n, n), and
    where each token of the block's grid went: (window, slot) long tensors from the seed's own
    roll and window_partition. No hooks: the model is replayed block by block."""
    attn_all, places = [], []
    with torch.no_grad():
        h = model.patch_embed(x)
        for layer in model.layers:
            for blk in layer.blocks:
                H, W = blk.input_resolution
                B, _, C = h.shape
                ws, sh = blk.window_size, blk.shift_size
                t = blk.norm1(h).view(B, H, W, C)
                ids = torch.arange(H * W, dtype=torch.float32).view(1, H, W, 1)
                if sh:
                    t = torch.roll(t, (-sh, -sh), dims=(1, 2))
                    ids = torch.roll(ids, (-sh, -sh), dims=(1, 2))
                win = module.window_partition(t, ws).view(-1, ws * ws, C)
                where = module.window_partition(ids, ws).reshape(-1, ws * ws).long()
                wnd = torch.empty(H * W, dtype=torch.long)
                slot = torch.empty(H * W, dtype=torch.long)
                for w in range(where.shape[0]):
                    for s in range(ws * ws):
                        wnd[where[w, s]], slot[where[w, s]] = w, s
                places.append((wnd, slot))
                a = blk.attn
                heads = a.num_heads
                qkv = a.qkv(win).reshape(win.shape[0], ws * ws, 3, heads, C // heads)
                q, k = qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)
                scores = (q * a.scale) @ k.transpose(-2, -1)
                idx = a.relative_position_index.view(-1)
                bias = a.relative_position_bias_table[idx].view(ws * ws, ws * ws, heads)
                scores = scores + bias.permute(2, 0, 1)
                if blk.attn_mask is not None:
                    scores = scores + blk.attn_mask[:, None]
                e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
                attn_all.append(e / e.sum(dim=-1, keepdim=True))
                h = blk(h)
            if layer.downsample is not None:
                h = layer.downsample(h)
    return attn_all, places


def _reference_rollout(attn, places, grids) -> torch.Tensor:
    """The windowed rollout by its definition, dense float64: uniform row over the last grid,
    r ← r·rownorm(mean_h(Â_b) + I) from the last block back, r ← r·M_s at stage boundaries."""
    blocks_per_grid = [(a.double(), p, g) for a, p, g in zip(attn, places, grids, strict=True)]
    H, W = grids[-1]
    r = torch.full((H * W,), 1.0 / (H * W), dtype=torch.float64)
    for b in range(len(blocks_per_grid) - 1, -1, -1):
        a, (wnd, slot), grid = blocks_per_grid[b]
        N = grid[0] * grid[1]
        if r.numel() != N:  # a stage boundary: M_s, 1/4 to each of the 2 × 2 tokens
            Wm = grid[1] // 2
            up = torch.zeros(N, dtype=torch.float64)
            for y in range(grid[0]):
                for x in range(grid[1]):
                    up[y * grid[1] + x] = r[(y // 2) * Wm + x // 2] / 4
            r = up
        fused = a.mean(dim=1)  # (windows, n, n)
        same = wnd[:, None] == wnd[None, :]  # tokens i and j share a window
        dense = fused[wnd[:, None], slot[:, None], slot[None, :]] * same  # (N, N)
        dense = dense + torch.eye(N, dtype=torch.float64)
        dense = dense / dense.sum(dim=-1, keepdim=True)
        r = r @ dense
    return (r / r.max()).reshape(grids[0])


def _open(tmp_path, model, settings=None):
    weights = tmp_path / "seed_swin.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
    spec = make_spec(SEED_FILE, "SwinTransformer", {}, weights, settings or {})
    return load_model_code(spec)


def test_seed_window_attention_from_its_file_equals_the_modules_run_by_hand(tmp_path):
    module, model = _seed_model()
    loaded = _open(tmp_path, model)
    assert isinstance(loaded.model, SwinCodeModel)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    out = loaded.model.forward_explained(x)
    want, _ = _by_hand(module, model, x)
    assert len(out.attentions) == len(want) == 4
    for got, ref in zip(out.attentions, want, strict=True):
        assert got.shape == (1, *ref.shape)
        assert (got[0] - ref).abs().max() < 1e-5
    assert [(lay.window, lay.shift) for lay in out.layouts] == [
        ((4, 4), (0, 0)),
        ((4, 4), (2, 2)),
        ((4, 4), (0, 0)),
        ((4, 4), (2, 2)),
    ]
    assert out.stage_grids == [(16, 16), (8, 8)]
    assert out.block_stages == [0, 0, 1, 1]
    with torch.no_grad():
        assert (out.logits - model(x)).abs().max() < 1e-5


def test_seed_rollout_and_logits_through_analyze_swin(tmp_path):
    module, model = _seed_model(seed=3)
    loaded = _open(tmp_path, model)
    x = torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(2))
    result = analyze_swin(loaded, x, gradients=True)
    with torch.no_grad():
        logits = model(x[None])[0]
    assert (result.logits - logits).abs().max() < 1e-5
    attn, places = _by_hand(module, model, x[None])
    grids = [blk.input_resolution for layer in model.layers for blk in layer.blocks]
    want = _reference_rollout(attn, places, grids)
    got = result.rollout().double()
    assert got.shape == (16, 16)
    assert (got - want).abs().max() < 1e-5
    assert want.std() > 0.01  # the map is not flat: the test can tell layouts apart
    assert result.gradients is not None and len(result.gradients) == 4
    photo = Image.fromarray(
        (torch.rand(40, 48, 3, generator=torch.Generator()) * 255).byte().numpy()
    )
    from_photo = analyze_swin(loaded, photo)  # prepared as the model code's preprocessing says
    assert from_photo.pixels.shape == (32, 32, 3) and from_photo.rollout().shape == (16, 16)
    assert torch.isfinite(result.gradient_rollout()).all()


def test_user_given_windows_replace_the_attributes_and_are_checked(tmp_path):
    module, model = _seed_model()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    for blk in (b for layer in model.layers for b in layer.blocks):
        blk.attn.window_size = None  # a guide that keeps no window size on its attention
    given = swin_code_model(model, (32, 32), 2, windows=[(4, 0), (4, 2), (4, 0), (4, 2)])
    out = given.forward_explained(x)
    want, _ = _by_hand(module, model, x)
    assert [lay.shift for lay in out.layouts] == [(0, 0), (2, 2), (0, 0), (2, 2)]
    assert all((a[0] - r).abs().max() < 1e-5 for a, r in zip(out.attentions, want, strict=True))
    with pytest.raises(ModelCodeError, match="windows"):
        swin_code_model(model, (32, 32), 2, windows=[(2, 0), (4, 2), (4, 0), (4, 2)])
    with pytest.raises(ModelCodeError, match="4 window-attention modules"):
        swin_code_model(model, (32, 32), 2, windows=[(4, 0)])


def test_torchvision_style_code_on_a_padded_map_matches_vitviz_own_swin(tmp_path):
    """torchvision's modules as 'user code': (B, H, W, C) block inputs, the shift on the
    attention itself, maps padded to whole windows (40 px: 10² tokens, windows of 4)."""
    from swin_helpers import tiny_torchvision_swin

    from vitviz.checkpoints import load_checkpoint

    ref = tiny_torchvision_swin(window=4).eval()
    path = tmp_path / "tv.pth"
    torch.save(ref.state_dict(), path)
    ours = load_checkpoint(path).model.eval()
    x = torch.randn(1, 3, 40, 40, generator=torch.Generator().manual_seed(4))
    code = swin_code_model(ref, (40, 40), 4)
    with torch.no_grad():
        got = code.forward_explained(x)
        want = ours.forward_explained(x)
    assert got.layouts == want.layouts
    assert any(lay.shifted and lay.padded != lay.grid for lay in got.layouts)
    assert got.stage_grids == want.stage_grids and got.block_stages == want.block_stages
    for a, b in zip(got.attentions, want.attentions, strict=True):
        assert (a - b).abs().max() < 1e-5
    assert (got.logits - want.logits).abs().max() < 1e-4
    # ∂y_c/∂A through the user's code is the same as through vitviz's own Swin
    mine, theirs = analyze_swin(code, x[0], gradients=True), analyze_swin(ours, x[0], True)
    for g, h in zip(mine.gradients, theirs.gradients, strict=True):
        assert (g - h).abs().max() < 1e-5 * max(1.0, float(h.abs().max()))
    assert (mine.gradient_rollout() - theirs.gradient_rollout()).abs().max() < 1e-4
    assert (mine.rollout() - theirs.rollout()).abs().max() < 1e-5


def test_windows_from_the_settings_and_a_bad_setting(tmp_path):
    module, model = _seed_model()
    windows = [[4, 0], [4, 2], [4, 0], [4, 2]]
    loaded = _open(tmp_path, model, {"swin_windows": windows})
    assert loaded.model.config.windows == ((4, 0), (4, 2), (4, 0), (4, 2))
    assert any("window layout from the settings" in n for n in loaded.notes)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    want, _ = _by_hand(module, model, x)
    got = loaded.model.forward_explained(x).attentions
    assert all((a[0] - r).abs().max() < 1e-5 for a, r in zip(got, want, strict=True))
    with pytest.raises(ModelCodeError, match=r"swin_windows must be \[\[window, shift\]"):
        make_spec(SEED_FILE, "SwinTransformer", {}, None, {"swin_windows": [4, 2]})
    with pytest.raises(ModelCodeError, match="shift must be a whole number"):
        make_spec(SEED_FILE, "SwinTransformer", {}, None, {"swin_windows": [[4, -1]]})


def test_cli_info_describes_the_seed_swin_by_stage(tmp_path, capsys):
    from vitviz.cli import main

    _, model = _seed_model()
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
    assert main(["info", str(weights), "--model-code", f"{SEED_FILE}:SwinTransformer"]) == 0
    out = capsys.readouterr().out
    assert "Swin, widths 16-32, depths 2-2, heads 2-4, windows 4-4, patch 2, image 32×32" in out


def test_token_gradcam_is_refused_on_a_swin_from_code(tmp_path) -> None:
    """It reads vitviz's own Swin's last norm1: the window lists it disabled, saying why."""
    from vitviz.kinds.swin.engine_data import unavailable

    loaded = _open(tmp_path, _seed_model()[1])
    reasons = unavailable(loaded)
    assert "your code" in reasons["gradcam"]
    assert not {"attention", "rollout", "gradient-rollout"} & set(reasons)


# -- a Swin from code gets what a ViT from code gets: fixed batches, probabilities -------------


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    """The seed Swin's file with one line of its forward changed."""
    text = SEED_FILE.read_text(encoding="utf-8")
    assert old in text
    file = tmp_path / "variant_swin.py"
    file.write_text(text.replace(old, new), encoding="utf-8")
    return file


def test_a_swin_returning_probabilities_is_read_as_its_probabilities(tmp_path):
    file = _variant(
        tmp_path, "        return self.head(x)\n", "        return self.head(x).softmax(-1)\n"
    )
    _, model = _seed_model(seed=2)
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
    loaded = load_model_code(make_spec(file, "SwinTransformer", {}, weights))
    assert loaded.model.config.outputs == "probabilities"
    assert any("the model returns probabilities" in n for n in loaded.notes)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got = loaded.model.forward_explained(x).logits
        want = model(x).softmax(-1)  # the seed's logits, as the variant returns them
    torch.testing.assert_close(got.exp(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.softmax(-1), want, atol=1e-5, rtol=1e-5)


def test_a_swin_fixing_its_batch_size_runs_padded_and_keeps_its_rows(tmp_path):
    file = _variant(
        tmp_path,
        "        x = self.patch_embed(x)\n",
        "        x = self.patch_embed(x.view(4, 3, 32, 32))\n",
    )
    module, model = _seed_model(seed=1)
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
    loaded = load_model_code(make_spec(file, "SwinTransformer", {}, weights))
    assert any("fixes the batch size at 4" in n for n in loaded.notes)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    out = loaded.model.forward_explained(x)
    for b in range(2):  # the seed's by-hand pass takes one image
        want, _ = _by_hand(module, model, x[b : b + 1])
        assert len(out.attentions) == len(want) == 4
        for got, ref in zip(out.attentions, want, strict=True):
            assert got.shape == (2, *ref.shape)
            assert_probabilities_close(got[b].detach(), ref)  # a batch of 4 rounds otherwise
    with torch.no_grad():
        torch.testing.assert_close(out.logits, model(x), atol=1e-5, rtol=1e-5)
    result = analyze_swin(loaded, x[0], gradients=True)
    assert result.gradients is not None and len(result.gradients) == 4
