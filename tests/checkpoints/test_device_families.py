"""The families on a GPU: each new part (relative position bias, rotary tables,
an attention pool, a ResNet stem, PVT v2's and Hiera's pyramids, CaiT's and XCiT's
class attention, PiT's pooling stages) analysed on CUDA gives the CPU's logits and every
method's map. (EVA-02 itself is left out: vitviz reads its rotary settings from timm 1.0.31's
modules and refuses an older timm's, as the GPU machine has; RoPE-Mixed and DINOv3 carry the
rotary tables here.) Skipped, with its reason, where there is no CUDA device (CI); the CPU side
of each is the families' own tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf
from zoo_helpers import randomize_, randomize_stem_

from vitviz.checkpoints import load_checkpoint
from vitviz.core.devices import resolve_device
from vitviz.explain.methods import all_methods
from vitviz.kindapi import kind_of

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
VIT = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4)
CASES = {  # id: (timm name, options, image side)
    "beit": ("beit_base_patch16_224", VIT, 32),
    "rope-mixed": ("vit_small_patch16_rope_mixed_224", VIT, 32),
    "dinov3": ("vit_small_patch16_dinov3", VIT, 32),
    "relpos": ("vit_relpos_small_patch16_224", VIT, 32),
    "map": ("vit_base_patch16_siglip_224", VIT, 32),
    "hybrid": ("vit_tiny_r_s16_p8_224", dict(embed_dim=32, depth=2, num_heads=4, patch_size=2), 32),
    "pvt-v2": ("pvt_v2_b0", {}, 64),
    "hiera": ("hiera_tiny_224", dict(embed_dim=16, num_heads=1, stages=(1, 2, 1, 1)), 64),
    "cait": ("cait_xxs24_224", dict(VIT, depth_token_only=1), 32),
    "xcit": ("xcit_nano_12_p16_224", dict(img_size=32, embed_dim=32, depth=2, num_heads=4), 32),
    "pit": ("pit_ti_distilled_224", dict(base_dims=[8] * 3, depth=[1, 2, 1], heads=[2, 2, 4]), 48),
    "levit": ("levit_128s", dict(embed_dim=(16, 24, 32), key_dim=4, num_heads=(2, 3, 4),
                                 depth=(1, 2, 1)), 96),
    "tnt": ("tnt_s_patch16_224", dict(embed_dim=32, inner_dim=8, depth=2, num_heads_outer=4,
                                      num_heads_inner=2, patch_size=8), 32),
}  # fmt: skip


def _folder(tmp_path: Path, case: str) -> tuple[Path, int]:
    name, options, side = CASES[case]
    torch.manual_seed(0)
    kwargs = dict(options) if case == "pvt-v2" else {"img_size": side, **options}  # PVT: any size
    model = randomize_(timm.create_model(name, pretrained=False, num_classes=3, **kwargs), seed=0)
    model = randomize_stem_(model, 0)  # a hybrid's ResNet at its own scale (others unchanged)
    folder = tmp_path / case
    save_for_hf(model.eval(), folder, model_args={**kwargs, "num_classes": 3})  # any timm
    return folder, side


@pytest.mark.parametrize("case", list(CASES))
def test_a_family_analysed_on_cuda_gives_the_cpu_maps(tmp_path: Path, case: str) -> None:
    folder, side = _folder(tmp_path, case)
    x = torch.randn(3, side, side, generator=torch.Generator().manual_seed(1))
    cpu_loaded = load_checkpoint(folder)
    gpu_loaded = load_checkpoint(folder)
    gpu_loaded.model.to(resolve_device("cuda"))  # as the window and the CLI move it
    kind = kind_of(cpu_loaded)
    cpu = kind.analyze(cpu_loaded, x, gradients=True, device="cpu")
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    nudged = [kind.analyze(cpu_loaded, y, gradients=True, device="cpu")
              for y in (x * (1 + 1e-5), x + 1e-5 * noise)]  # fmt: skip
    gpu = kind.analyze(gpu_loaded, x, gradients=True, device="cuda")
    torch.testing.assert_close(gpu.logits.cpu(), cpu.logits.cpu(), atol=1e-4, rtol=1e-4)
    compared = 0
    for method in all_methods():
        if method.unavailable(cpu) is not None or method.name == "random":
            continue
        want = method(cpu, None, None, {})
        got = method(gpu, None, None, {})
        # A map the CPU itself moves by w when the input moves by 1e-5 is held to 10 w beside
        # 2e-4: float32 can't tell it closer, rounded on another device (divisions by a sum
        # near zero: a relative-position ViT's transformer attribution moves by 1e-2 for an
        # input change of 1e-7, XGrad-CAM on a 2 × 2 stage by 1e-3). A wrong GPU path moves a
        # well-conditioned map (w ≈ 1e-6) by its scale.
        wobble = max(float((method(n, None, None, {}).float() - want.float()).abs().max())
                     for n in nudged)  # fmt: skip
        torch.testing.assert_close(
            got.cpu().float(), want.cpu().float(), atol=2e-4 + 10 * wobble, rtol=1e-3,
            msg=lambda m, name=method.name: f"{case}, {name}: {m}",
        )  # fmt: skip
        compared += 1
    assert compared >= 3, f"{case}: only {compared} methods apply"
