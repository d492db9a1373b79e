"""Where an analysis spends its time: torch.profiler over the cases of ``analysis_overhead.py``.

For one variant (default ViT-B/16 at 224) on ``--device``, each case runs ``--warmup`` times,
then ``--repeats`` times under the profiler. Printed per case: the wall time per call, the
operators with the most self CPU time (the host side: what vitviz controls), the kernels with
the most device time, and the host syncs (``item``/``_local_scalar_dense``, stream and device
synchronisations, device-to-host copies) per call: the usual reasons a batch-1 analysis on a
GPU costs more than its arithmetic. No targets: it explains a missed one.

    .venv/bin/python benchmarks/analysis_profile.py [--device cuda] [--model vit-large]
        [--image-size 518] [--patch-size 14] [--cases b,c] [--rows 15]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch
from _common import (
    add_device_option,
    bench_device,
    device_name,
    parser,
    read_args,
    repeats_and_warmup,
)
from analysis_overhead import LABELS, TIMM_MODELS, build, make_cases, size_overrides
from PIL import Image
from torch.profiler import ProfilerActivity, profile

from vitviz.blocks import VARIANT_NAMES

SYNC_NAMES = (
    "aten::item",
    "aten::_local_scalar_dense",
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaMemcpyAsync",
    "Memcpy DtoH (Device -> Pageable)",
    "Memcpy DtoH (Device -> Pinned)",
    "aten::nonzero",
)


def profile_case(fn, device: torch.device, repeats: int, warmup: int, rows: int) -> None:
    """Profile ``repeats`` calls of ``fn`` and print the host, device and sync tables."""
    for _ in range(warmup):
        fn()
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(repeats):
            fn()
    wall = (time.perf_counter() - start) / repeats
    events = prof.key_averages()
    print(f"wall per call under the profiler: {wall * 1e3:.2f} ms")
    print(events.table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=60))
    if device.type == "cuda":
        print(events.table(sort_by="self_device_time_total", row_limit=rows,
                           max_name_column_width=60))  # fmt: skip
    counts = {e.key: e.count for e in events if e.key in SYNC_NAMES}
    kernels = sum(e.count for e in events if getattr(e, "device_type", None) is not None
                  and str(e.device_type).endswith("CUDA"))  # fmt: skip
    print("per call: " + ", ".join(f"{k} {v / repeats:g}" for k, v in sorted(counts.items())))
    if device.type == "cuda":
        print(f"per call: device events {kernels / repeats:g}")


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=(*VARIANT_NAMES, *TIMM_MODELS), default="vit-base")
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--patch-size", type=int, default=None)
    p.add_argument("--cases", default="a,b,c", help="row keys of analysis_overhead (a,b,c,query)")
    p.add_argument("--rows", type=int, default=15, help="rows of each table")
    add_device_option(p)
    args = read_args(p, argv)
    device = bench_device(args.device)
    overrides = size_overrides(args)
    loaded = build(args.model, **overrides)
    loaded.model.to(device)
    cfg = loaded.config
    x = torch.randn(1, cfg.in_channels, *cfg.image_size, generator=torch.Generator().manual_seed(1))
    photo = Image.fromarray(np.zeros((64, 64, 3), np.uint8), "RGB")
    cases = make_cases(loaded, x, photo)
    repeats, warmup = repeats_and_warmup(args, quick=(2, 2), full=(10, 2))
    print(f"# Profile: {args.model} at {cfg.image_size[0]}, patch {cfg.patch_size}, batch 1")
    print(f"device: {device_name(device)}; {repeats} profiled calls after {warmup} warm-ups")
    for key in args.cases.split(","):
        print(f"\n## {LABELS[key].format(w=64, h=64)}")
        profile_case(cases[key], device, repeats, warmup, args.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
