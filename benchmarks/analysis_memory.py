"""Peak memory of a whole analysis against 1.5 × (weights + float32 attention).

ViT-L/14 at 518 (1,370 tokens) with random weights by default (``--depth`` keeps fewer layers:
on a small CPU machine the full 24 take minutes), each case in a fresh subprocess:

  (a) ``analyze`` + rollout + every layer's CLS maps (attention only);
  (b) ``analyze(gradients=True)`` + rollout + gradient rollout + relevance (attention, one
      class's gradients, the prepared rollouts): the whole analysis;
  (c) as (a) with ``attention_dtype=torch.float16`` (info).

Peak: on the CPU the process's peak RSS (VmHWM) above its RSS before the model was built, so
the weights are in it; on CUDA ``torch.cuda.max_memory_allocated`` (weights included).
Target: (a) and (b) ≤ 1.5 × (weights + L·H·N²·4 bytes).

    .venv/bin/python benchmarks/analysis_memory.py [--quick] [--no-check] [--device cuda]
        [--model vit-large] [--image-size 518] [--patch-size 14] [--depth 6]
"""

from __future__ import annotations

import json
import subprocess
import sys

from _common import (
    Check,
    add_device_option,
    bench_device,
    device_name,
    environment,
    finish,
    print_table,
)
from _common import parser as base_parser

TARGET = 1.5  # peak / (weights + float32 attention), at most
CASES = {
    "a": ("(a) analyze + rollout + all CLS maps", False, "float32"),
    "b": ("(b) analyze(gradients) + rollout, gradient rollout, relevance", True, "float32"),
    "c": ("(c) as (a), attention kept in float16", False, "float16"),
}

CHILD = r"""
import json, sys
import torch
from vitviz.pipeline.analysis import analyze
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.checkpoints.native import default_preprocessing
from vitviz.blocks import create_model

variant, size, patch, depth, device, grads, dtype = sys.argv[1:8]
size, patch, depth, grads = int(size), int(patch), int(depth), grads == "1"


def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


dev = torch.device(device)
before = status("VmRSS") if dev.type == "cpu" else 0
torch.manual_seed(0)
model = create_model(variant, image_size=size, patch_size=patch, depth=depth).eval().to(dev)
cfg = model.config
names = [f"class {i}" for i in range(cfg.num_classes)]
loaded = LoadedModel(model, names, default_preprocessing(cfg), "vitviz")
x = torch.randn(3, size, size, generator=torch.Generator().manual_seed(1))
if dev.type == "cuda":
    torch.cuda.reset_peak_memory_stats(dev)
a = analyze(loaded, x, gradients=grads, attention_dtype=getattr(torch, dtype))
maps = [a.rollout(), a.all_attention_maps()]
if grads:
    maps += [a.gradient_rollout(), a.relevance()]
assert all(bool(torch.isfinite(m).all()) for m in maps)
if dev.type == "cuda":
    peak = torch.cuda.max_memory_allocated(dev)
else:
    peak = status("VmHWM") - before
weights = sum(p.numel() * p.element_size() for p in model.parameters())
N = a.attention.shape[-1]
print(json.dumps({"peak": peak, "weights": weights, "attention": 4 * cfg.depth * cfg.heads * N * N,
                  "tokens": N}))
"""


def measure(variant: str, size: int, patch: int, depth: int, device: str, key: str) -> dict:
    _, grads, dtype = CASES[key]
    args = [variant, str(size), str(patch), str(depth), device, "1" if grads else "0", dtype]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"case {key} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    add_device_option(p)
    p.add_argument("--model", default=None, help="variant (default vit-large)")
    p.add_argument("--image-size", type=int, default=None, help="input side (518)")
    p.add_argument("--patch-size", type=int, default=None, help="patch side (14)")
    p.add_argument("--depth", type=int, default=None, help="layers kept (the variant's)")
    args = p.parse_args(argv)
    device = bench_device(args.device)
    variant = args.model or ("cifar10-tutorial" if args.quick else "vit-large")
    size = args.image_size or (96 if args.quick else 518)
    patch = args.patch_size or (8 if args.quick else 14)
    from vitviz.blocks import vit_config

    depth = args.depth or vit_config(variant).depth
    results = {k: measure(variant, size, patch, depth, str(device), k) for k in CASES}
    rows, checks = [], []
    for key, r in results.items():
        budget = r["weights"] + r["attention"]
        ratio = r["peak"] / budget
        check = None
        if key != "c":
            check = Check(f"{CASES[key][0]}: peak / (weights + attention)", ratio, TARGET, True)
            checks.append(check)
        rows.append(
            [
                CASES[key][0],
                gib(r["peak"]),
                gib(r["weights"]),
                gib(r["attention"]),
                f"{ratio:.2f}",
                check.target if check else "info",
                check.verdict if check else "",
            ]
        )
    n = results["a"]["tokens"]
    print(
        f"# Analysis memory: {variant} at {size}×{size}, patch {patch}, {depth} layers, "
        f"{n:,} tokens, batch 1, {device.type}"
    )
    print(f"device: {device_name(device)}")
    print(environment())
    print(
        "each case in a fresh subprocess; peak = "
        + ("max_memory_allocated" if device.type == "cuda" else "VmHWM − RSS before the model")
    )
    print()
    headers = ["case", "peak", "weights", "attention (f32)", "peak / (w + a)", "target", "verdict"]
    print_table(headers, rows)
    print()
    return finish(checks, args.no_check)


if __name__ == "__main__":
    sys.exit(main())
