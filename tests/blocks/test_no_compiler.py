"""An explain never touches torch's compiler: torch._dynamo / torch._inductor stay unimported and
nothing is written to the temp folder (their import makes ``$TMPDIR/torchinductor_<user>``).
Both are seen in a fresh Python, where nothing else imported them first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
from conftest import random_vit

from vitviz.blocks.recompute import recomputed

REPO = Path(__file__).resolve().parents[2]
COMPILER = ("torch._dynamo", "torch._inductor")

_ANALYZE = r"""
import sys
import torch
from conftest import random_vit
from vitviz.pipeline.analysis import analyze
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.pipeline.export import compute_maps
from vitviz.imaging import Preprocessing

model = random_vit(0)
size = model.config.image_size
loaded = LoadedModel(model, [f"c{i}" for i in range(model.config.num_classes)],
                     Preprocessing(size), "t")
compute_maps(analyze(loaded, torch.rand(3, *size), gradients=True))
print("compiler:", " ".join(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules)
      or "none")
if len(sys.argv) > 1:  # then a plain explain from the command line, in the same process
    from vitviz.cli import main

    assert main(["explain", *sys.argv[1:]]) == 0
    print("compiler:", " ".join(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules)
          or "none")
"""


def _child(argv: list[str], temp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python *argv`` from the checkout with ``temp`` as its TMPDIR (and ``env``); the
    compiler cache variables unset, so torch would choose the temp folder."""
    path = [str(REPO), str(REPO / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])]
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "TMPDIR": str(temp), **env}
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        full.pop(name, None)
    proc = subprocess.run(
        [sys.executable, *argv], env=full, cwd=REPO, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_analyze_with_gradients_and_a_plain_explain_import_no_compiler_and_leave_temp_empty(
    tmp_path: Path, tiny_ckpt: Path, photo_files: dict[str, Path]
) -> None:
    """One fresh Python (one start-up, not two): an analysis with gradients, then the CLI's
    explain; after each, neither compiler module is imported, and the temp folder stays empty."""
    temp = tmp_path / "temp"
    temp.mkdir()
    out = tmp_path / "out"
    image, ckpt = str(photo_files["chelsea"]), str(tiny_ckpt)
    proc = _child(["-c", _ANALYZE, image, "--checkpoint", ckpt, "--out", str(out)], temp)
    seen = [line for line in proc.stdout.splitlines() if line.startswith("compiler:")]
    assert seen == ["compiler: none"] * 2, proc.stdout  # after the analysis, after the explain
    assert any(out.iterdir())  # the explain did run
    assert sorted(os.listdir(temp)) == []


def test_recomputed_blocks_give_the_same_gradients_and_hooks_as_a_plain_pass() -> None:
    """The recomputation (in place of torch.utils.checkpoint) changes no number: the input's
    gradient and every attention's gradient (seen by a hook on the forward pass's tensor)."""
    model = random_vit(0, depth=3)
    x = torch.rand(2, 3, *model.config.image_size)

    def gradients(recompute: bool) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        xs = x.clone().requires_grad_(True)
        seen: dict[int, torch.Tensor] = {}

        def sink(layer: int, a: torch.Tensor) -> None:
            a.register_hook(lambda g: seen.__setitem__(layer, g.clone()))

        out = model.forward_explained(
            xs, capture_attention=True, attention_sink=sink, recompute_blocks=recompute
        )
        (g,) = torch.autograd.grad(out.logits[:, 1].sum(), xs)
        return g, seen

    g_plain, seen_plain = gradients(False)
    g_again, seen_again = gradients(True)
    assert torch.equal(g_plain, g_again)
    assert sorted(seen_again) == sorted(seen_plain) == [0, 1, 2]
    for layer, g in seen_plain.items():
        assert torch.equal(g, seen_again[layer])


def test_recomputed_runs_the_function_again_in_the_backward_pass() -> None:
    """One run forward, one more in the backward pass; the gradients are a plain pass's."""
    weight = torch.randn(4, 4, requires_grad=True)
    runs = []

    def fn(t: torch.Tensor) -> torch.Tensor:
        runs.append(1)
        return (t @ weight).tanh() @ weight

    x = torch.randn(3, 4, requires_grad=True)
    y = recomputed(fn, x * 2)
    assert len(runs) == 1
    y.sum().backward()
    assert len(runs) == 2
    x_ref = x.detach().clone().requires_grad_(True)
    w_ref = weight.detach().clone().requires_grad_(True)
    ((x_ref * 2 @ w_ref).tanh() @ w_ref).sum().backward()
    assert torch.allclose(x.grad, x_ref.grad) and torch.allclose(weight.grad, w_ref.grad)


_COMPILE = r"""
import torch
from vitviz.training.compiled import CompiledOrEager

notes = []
step = CompiledOrEager(lambda t: (t * 2).sum(), True, notes.append, backend="eager")
print(float(step.run(lambda f: f(torch.ones(3)))), step.active, notes)
"""


def test_training_compiles_with_its_caches_in_vitviz_cache_folder(tmp_path: Path) -> None:
    """Where the compiler must run (training with compile on), its caches go to
    ``$XDG_CACHE_HOME/vitviz/torch-compile``, not the temp folder."""
    temp, cache = tmp_path / "temp", tmp_path / "cache"
    temp.mkdir()
    proc = _child(["-c", _COMPILE], temp, XDG_CACHE_HOME=str(cache))
    assert proc.stdout.split()[:2] == ["6.0", "True"], proc.stdout
    assert (cache / "vitviz" / "torch-compile" / "inductor").is_dir()
    assert sorted(os.listdir(temp)) == []
