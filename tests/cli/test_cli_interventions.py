"""``vitviz-cli ablate``, ``patch`` and ``explain --ablate`` (DESIGN §5, "Interventions"): the
files hold what the Python API computes; folders give the mean and standard deviation; a head
the model lacks or a bad ``--ablate`` is one line and exit status 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import CLASS_NAMES, random_vit
from PIL import Image

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.cli import main
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.head_effects import head_effects, patching_effects


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ckpt")
    model = random_vit(3, depth=2, heads=2)
    return save_checkpoint(model, folder / "tiny.safetensors", class_names=CLASS_NAMES)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(4)
    for sub in ("a", "b"):
        (root / sub).mkdir()
        for i in range(3):
            pixels = rng.integers(0, 256, (40, 44, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / sub / f"im{i}.png")
    return root / "a", root / "b"


def test_ablate_writes_each_images_effects_and_the_folders_spread(ckpt, folders, tmp_path):
    out = tmp_path / "out"
    assert main(["ablate", str(folders[0]), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    loaded = load_checkpoint(ckpt)
    grids = []
    for i in range(3):
        got = np.load(out / f"im{i}_ablation.npz")
        assert (out / f"im{i}_ablation.png").stat().st_size > 0
        x = analyze(loaded, folders[0] / f"im{i}.png").input
        want = head_effects(loaded, x)
        np.testing.assert_allclose(got["head_effect"], want.effect.numpy(), atol=1e-6)
        np.testing.assert_allclose(got["head_effect_prob"], want.effect_prob.numpy(), atol=1e-6)
        assert int(got["target_class"]) == want.target and str(got["mode"]) == "zero"
        np.testing.assert_allclose(got["logits"], want.logits.numpy(), atol=1e-6)
        assert got["head_effect"].shape == (2, 2)
        grids.append(got["head_effect"])
    summary = np.load(out / "ablation_summary.npz")
    np.testing.assert_allclose(summary["head_effect_mean"], np.mean(grids, 0), atol=1e-6)
    np.testing.assert_allclose(summary["head_effect_std"], np.std(grids, 0), atol=1e-6)
    assert list(summary["images"]) == ["im0.png", "im1.png", "im2.png"]


def test_ablate_mean(ckpt, folders, tmp_path):
    image = folders[0] / "im1.png"
    args = ["ablate", str(image), "--checkpoint", str(ckpt), "--out", str(tmp_path)]
    assert main([*args, "--ablation", "mean", "--batch-size", "1"]) == 0
    loaded = load_checkpoint(ckpt)
    want = head_effects(loaded, analyze(loaded, image).input, mode="mean")
    got = np.load(tmp_path / "im1_ablation.npz")
    np.testing.assert_allclose(got["head_effect"], want.effect.numpy(), atol=1e-6)
    assert str(got["mode"]) == "mean"


def test_patch_pairs_two_folders_by_name(ckpt, folders, tmp_path):
    a, b = folders
    assert main(["patch", str(a), str(b), "--checkpoint", str(ckpt), "--out", str(tmp_path)]) == 0
    loaded = load_checkpoint(ckpt)
    grids = []
    for i in range(3):
        got = np.load(tmp_path / f"im{i}_to_im{i}_patching.npz")
        xa = analyze(loaded, a / f"im{i}.png").input
        xb = analyze(loaded, b / f"im{i}.png").input
        want = patching_effects(loaded, xa, xb)
        np.testing.assert_allclose(got["patching_effect"], want.effect.numpy(), atol=1e-5)
        assert int(got["target_class"]) == want.target
        grids.append(got["patching_effect"])
    summary = np.load(tmp_path / "patching_summary.npz")
    np.testing.assert_allclose(summary["patching_effect_mean"], np.mean(grids, 0), atol=1e-6)
    np.testing.assert_allclose(summary["patching_effect_std"], np.std(grids, 0), atol=1e-6)


def test_patch_says_which_images_have_no_namesake(ckpt, folders, tmp_path, capsys):
    """An image of one folder without a same-named image in the other is named on stderr (not
    patched), never left out silently; the pairs are patched."""
    a, b = tmp_path / "clean", tmp_path / "corrupted"
    a.mkdir(), b.mkdir()
    for name in ("im0.png", "im1.png"):
        (a / name).write_bytes((folders[0] / name).read_bytes())
    (a / "only_clean.png").write_bytes((folders[0] / "im2.png").read_bytes())
    (b / "im0.png").write_bytes((folders[1] / "im0.png").read_bytes())
    (b / "im1.png").write_bytes((folders[1] / "im1.png").read_bytes())
    out = tmp_path / "out"
    assert main(["patch", str(a), str(b), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"not patched, no namesake in {b}: only_clean.png (in {a})" in err, err
    assert sorted(p.name for p in out.glob("*_patching.npz")) == [
        "im0_to_im0_patching.npz",
        "im1_to_im1_patching.npz",
    ]


def test_explain_ablate_writes_the_intervened_models_numbers(ckpt, folders, tmp_path):
    image = folders[0] / "im2.png"
    args = ["explain", str(image), "--checkpoint", str(ckpt), "--out", str(tmp_path)]
    assert main([*args, "--ablate", "1.0", "--ablate", "0.*"]) == 0
    loaded = load_checkpoint(ckpt)
    want = analyze(loaded, image, ablate=[(1, 0), (0, 0), (0, 1)])
    clean = analyze(loaded, image)
    got = np.load(tmp_path / "im2.npz")
    np.testing.assert_allclose(got["logits"], want.logits.numpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(got["logits"] - clean.logits.numpy()).max() > 1e-3
    # layer 0's heads knocked out: layer 1's attention is the intervened model's
    np.testing.assert_allclose(got["attention"], want.attention.numpy(), atol=1e-5)
    assert np.abs(got["attention"][1] - clean.attention[1].numpy()).max() > 1e-3


def test_explain_ablate_mlp_writes_the_intervened_model_and_says_so(ckpt, folders, tmp_path):
    image = folders[0] / "im1.png"
    args = ["explain", str(image), "--checkpoint", str(ckpt), "--out", str(tmp_path)]
    assert main([*args, "--ablate", "1.mlp", "--ablate", "0.1", "--ablation", "mean"]) == 0
    loaded = load_checkpoint(ckpt)
    want = analyze(loaded, image, ablate=[(0, 1)], ablation="mean", ablate_mlp=[1])
    clean = analyze(loaded, image)
    got = np.load(tmp_path / "im1.npz")
    np.testing.assert_allclose(got["logits"], want.logits.numpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(got["logits"] - clean.logits.numpy()).max() > 1e-3
    assert got["ablated"].tolist() == [[0, 1]] and str(got["ablation"]) == "mean"
    assert got["ablated_mlp"].tolist() == [1] and got["ablated_attention"].tolist() == []


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--ablate", "2.0"], "no layer 2"),
        (["--ablate", "1.5"], "layer 1 has heads 0–1"),
        (["--ablate", "3.*"], "no layer 3"),
        (["--ablate", "one"], "use L.H, L.*, L.attn or L.mlp"),
        (["--ablate", "4.mlp"], "no block 4"),
    ],
)
def test_explain_ablate_refuses_in_one_line(ckpt, folders, tmp_path, capsys, extra, words):
    image = folders[0] / "im0.png"
    args = ["explain", str(image), "--checkpoint", str(ckpt), "--out", str(tmp_path / "o")]
    assert main([*args, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not (tmp_path / "o" / "im0.npz").exists()


def test_an_xcits_attn_and_mlp_count_the_same_blocks(folders, tmp_path, capsys):
    """An XCiT has XCA blocks (0, 1) then class-attention blocks (2, 3), the head grid's rows:
    ``2.attn`` and ``2.mlp`` are the same block's branches; ``0.attn`` (an XCA block's heads
    are no row) is refused in one line naming the blocks that are."""
    from test_intermediates_token import _timm_xcit

    _timm_xcit(tmp_path)
    ckpt = tmp_path / "xcit.pth"
    loaded = load_checkpoint(ckpt)  # as the command opens it
    image = folders[0] / "im1.png"
    args = ["explain", str(image), "--checkpoint", str(ckpt), "--out", str(tmp_path / "o")]
    assert main([*args, "--ablate", "2.attn", "--ablate", "0.mlp"]) == 0
    got = np.load(tmp_path / "o" / "im1.npz")
    want = analyze(loaded, image, ablate_attention=[2], ablate_mlp=[0])
    np.testing.assert_allclose(got["logits"], want.logits.numpy(), rtol=1e-5, atol=1e-6)
    assert got["ablated_attention"].tolist() == [2] and got["ablated_mlp"].tolist() == [0]
    last = analyze(loaded, image, ablate_attention=[3]).logits
    assert np.abs(got["logits"] - last.numpy()).max() > 1e-4  # block 2, not the last CA block
    capsys.readouterr()
    assert main([*args, "--ablate", "0.attn"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no row of the head grid" in err[0] and "blocks 2–3" in err[0], err
