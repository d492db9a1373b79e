"""vitviz.kinds.vit.memory's estimate of an analysis against the peak memory it really takes.

Each case runs in a fresh Python process: a random ViT (patch 8, the layers, heads and width
given), one warm-up analysis at 32 px, then ``analyze`` of an input of the given size, either
without gradients ("plain"), with them ("grads"), or with them and the three maps of
``vitviz-cli explain`` ("cli": rollout, gradient rollout, relevance); the "keep K" cases keep
only the last K layers (``analyze(..., layers="last:K")``, the maps that need every layer left
out). Reported: the peak RSS the
analysis added (VmHWM after − before on Linux, ``ru_maxrss`` elsewhere), the estimate
(``MemoryEstimate.needed``) and their ratio. Target: every ratio in [1, 2] (an upper bound,
within 2× of the truth); a ratio below 1 is a wrong result (the estimate would let an analysis
run out of memory).

    .venv/bin/python benchmarks/memory_estimate.py [--quick] [--no-check] [--kept-only]
"""

from __future__ import annotations

import json
import subprocess
import sys

from _common import REPO_ROOT, Check, environment, finish, parser, print_table

# (input side, layers, heads, width): token counts 1,025-9,217; 1-12 layers; 1-4 heads.
CASES = [
    (256, 2, 2, 32),
    (512, 2, 2, 32),
    (768, 2, 2, 32),
    (512, 1, 1, 32),
    (512, 4, 1, 32),
    (512, 1, 4, 32),
    (512, 4, 4, 64),
    (224, 12, 3, 192),
    (320, 12, 3, 192),
]
QUICK_CASES = [(128, 2, 2, 32), (256, 2, 2, 32)]
# (input side, layers, heads, width, layers kept): the estimate of an analysis of fewer layers
KEPT_CASES = [(512, 4, 2, 32, 1), (512, 8, 2, 32, 2), (320, 12, 3, 192, 3)]
QUICK_KEPT_CASES = [(256, 4, 2, 32, 1)]
MODES = ("plain", "grads", "cli")
UPPER = 2.0

CHILD = r"""
import gc, json, resource, sys
sys.path.insert(0, sys.argv[1])
import torch
from vitviz.pipeline.analysis import analyze
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.pipeline.export import compute_maps
from vitviz.imaging import Preprocessing
from vitviz.kinds.vit.memory import estimate_analysis
from vitviz.blocks import VisionTransformer, ViTConfig
size, L, H, D = (int(v) for v in sys.argv[2:6])
mode = sys.argv[6]
keep = int(sys.argv[7])
layers = f"last:{keep}" if keep else None
torch.set_num_threads(2)
cfg = ViTConfig(image_size=32, patch_size=8, dim=D, depth=L, heads=H, num_classes=3)
model = VisionTransformer(cfg).eval()
loaded = LoadedModel(model, ["a", "b", "c"], Preprocessing(image_size=(32, 32)), "bench")
prep, grads = Preprocessing(image_size=(size, size)), mode != "plain"
warm = analyze(loaded, torch.zeros(3, 32, 32), preprocessing=prep, gradients=grads)
compute_maps(warm)
del warm
gc.collect()


def rss():
    # Peak RSS in bytes. Linux: VmHWM of this process's own memory (ru_maxrss keeps the
    # parent's high-water mark across fork and exec); elsewhere ru_maxrss (bytes on macOS).
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
before = rss()
a = analyze(loaded, torch.zeros(3, size, size), preprocessing=prep, gradients=grads, layers=layers)
if mode == "cli":
    compute_maps(a)
peak = rss() - before
est = estimate_analysis(
    cfg, (size, size), gradients=grads, maps=mode == "cli", layers=keep or None
)
print(json.dumps({"tokens": a.attention.shape[-1], "peak": peak, "estimate": est.needed}))
"""


def measure(size: int, layers: int, heads: int, width: int, mode: str, keep: int = 0) -> dict:
    """Peak bytes the analysis added and the estimate, from a fresh process (``keep``: the
    last layers kept, 0 for all)."""
    args = [str(v) for v in (size, layers, heads, width)]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO_ROOT), *args, mode, str(keep)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"case {args} {mode} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--kept-only", action="store_true", help="only the keep-K cases")
    args = p.parse_args()
    cases = [] if args.kept_only else [(*c, 0) for c in (QUICK_CASES if args.quick else CASES)]
    cases += QUICK_KEPT_CASES if args.quick else KEPT_CASES
    rows, checks, wrong = [], [], []
    mib = 2**20
    for size, layers, heads, width, keep in cases:
        for mode in MODES:
            m = measure(size, layers, heads, width, mode, keep)
            ratio = m["estimate"] / max(1, m["peak"])
            kept = f", keep {keep}" if keep else ""
            name = f"{size} px, L {layers}, H {heads}, D {width}{kept}, {mode}"
            rows.append(
                [
                    name,
                    f"{m['tokens']:,}",
                    f"{m['peak'] / mib:.0f}",
                    f"{m['estimate'] / mib:.0f}",
                    f"{ratio:.2f}",
                ]
            )
            if ratio < 1.0 and not args.quick:
                wrong.append(f"{name}: estimate {ratio:.2f}× the measured peak (below it)")
            checks.append(Check(name, ratio, UPPER, at_most=True))
    print(environment())
    print_table(["case", "tokens", "peak MiB", "estimate MiB", "estimate / peak"], rows)
    return finish([] if args.quick else checks, args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
