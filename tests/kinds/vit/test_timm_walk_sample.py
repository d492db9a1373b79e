"""A sample of timm's ViT-family names per run (seed printed): each exact or refused, none opened
wrong. The full walk is benchmarks/timm_walk.py."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from script_main import run_script

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


def test_a_sample_of_timm_names_is_exact_or_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("VITVIZ_WALK_SEED", random.randrange(10_000)))
    print(f"timm walk sample seed {seed} (VITVIZ_WALK_SEED={seed} repeats it)")
    args = ["--sample", "3", "--seed", str(seed), "--max-params", "25e6", "--budget", "60"]
    code, out, err = run_script(
        BENCHMARKS / "timm_walk.py",
        *args,
        capfd=capfd,
        env={"VITVIZ_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"},
        unset=("VITVIZ_NO_LIBRARY_CHECK",),
    )  # in this process: no interpreter, torch and timm of its own to start
    assert "OPEN-AND-WRONG: 0" in out, f"seed {seed}\n{out}\n{err}"
    assert code == 0, f"seed {seed}: exit {code}\n{out}\n{err}"
    rows = [line.split() for line in out.splitlines() if not line.startswith("|")]
    verdicts = [row[2] for row in rows if len(row) > 2 and row[1] in ("bare", "folder")]
    assert len(verdicts) >= 2 and set(verdicts) <= {"exact", "exact-float64", "refused", "not"}, out


def test_the_walk_tells_float32_rounding_from_a_wrong_model() -> None:
    """The walk's float64 reading (``float64_error``): the same function computed in another
    order is ~0 in float64; a model that computes otherwise is not."""
    import torch

    walk = _walk()
    torch.manual_seed(0)
    library = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    same = torch.nn.Sequential(*[m for m in library])  # the same weights, another module
    x = torch.randn(2, 8)
    assert walk.float64_error(same, library, x) <= walk.FLOAT64_RTOL
    other = torch.nn.Sequential(library[0], torch.nn.ReLU(), library[2])  # GELU -> ReLU
    assert walk.float64_error(other, library, x) > 1e-3


def _walk():
    import importlib.util

    spec = importlib.util.spec_from_file_location("timm_walk", BENCHMARKS / "timm_walk.py")
    walk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(walk)
    return walk


def test_a_name_whose_logits_overflow_is_perturbed_at_its_layers_scale(monkeypatch) -> None:
    """The walk's ``build``: a model whose own logits the one 0.2 perturbation overflows (a
    wide LeViT; here a tiny one perturbed 100 wide) is perturbed at each layer's fan-in, its
    BatchNorm statistics random, and its logits are finite and distinct; one the perturbation
    keeps finite keeps ``randomize_``'s weights (the walk's earlier results stand)."""
    from functools import partial

    import torch
    from timm.models.levit import Levit
    from zoo_helpers import randomize_

    walk = _walk()

    def tiny_levit(name, pretrained, num_classes, img_size=None):
        sizes = dict(embed_dim=(32, 48), key_dim=8, depth=(1, 1), num_heads=(2, 3))
        return Levit(img_size=img_size or 64, num_classes=num_classes, **sizes)

    monkeypatch.setattr(walk.timm, "create_model", tiny_levit)
    kept, x = walk.build("tiny", seed=7)
    torch.manual_seed(7)
    want = randomize_(tiny_levit("", False, 5, 32), seed=7, noise_dtype=torch.float32)
    for (name, a), b in zip(kept.state_dict().items(), want.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    monkeypatch.setattr(walk, "randomize_", partial(randomize_, scale=100.0))
    model, x = walk.build("tiny", seed=7)
    with torch.no_grad():
        logits = model(x)
    assert logits.isfinite().all() and logits.std() > 1e-3, logits
    bn = model.stages[0].blocks[0].attn.qkv.bn
    assert not torch.equal(bn.running_var, torch.ones_like(bn.running_var))
