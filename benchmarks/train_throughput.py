"""Training throughput: vitviz's loop against the tutorials' loop, same model, data and steps.

The tutorials' CIFAR-10 ViT (32 px, patch 8, dim 64, depth 4, heads 4) on CIFAR-10-shaped
generated data (uint8 32 × 32 RGB, 10 classes), batch 64, on the CPU (or the GPU with --device):

  (a) the tutorials' loop: a map-style Dataset of uint8 HWC arrays whose __getitem__ makes a PIL
      image and applies torchvision RandomCrop(32, padding=4), RandomHorizontalFlip, ToTensor,
      Normalize; DataLoader(batch_size=64, shuffle=True, num_workers=2); AdamW; cross-entropy.
  (b) vitviz.training.run_training: uint8 tensors on the device, batched crop + flip, AdamW
      (fused), warmup + cosine, label smoothing, gradient clipping, stochastic depth; bf16
      autocast and torch.compile of the step as its ``--compile`` mode says (default auto:
      compiled on CUDA only).

Each loop runs in its own subprocess (so peak RSS is its own), the runs alternate, and images
per second are taken over the same optimizer steps after a warm-up (compiling falls in it).
Target: (b) ≥ 2 × (a) on the CPU, ≥ 3 × (a) on CUDA. ``--model swin``: both loops
train the Training tab's small Swin preset instead (32 px, patch 2, window 4, widths 48-96-192,
depths 2-2-2), the same target.

``--ops``: no timing; the host work of one step instead, counted with torch.profiler over a few
steps after a warm-up: aten operator calls, host reads (``.item()``) and, on CUDA, the kernels
and copies the GPU ran, per step, for (a), for (b) eager and for (b) compiled where ``--compile``
compiles on the device.

    .venv/bin/python benchmarks/train_throughput.py [--quick] [--no-check] [--steps N]
        [--model vit|swin] [--device cpu|cuda|mps] [--compile [auto|on|off]] [--ops]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import (
    Check,
    add_device_option,
    bench_device,
    device_name,
    environment,
    finish,
    parser,
    peak_rss_mib,
    print_table,
)
from _step_ops import StepOps

TARGET = 2.0  # (b) / (a) images per second, at least
TARGET_CUDA = 3.0  # on a CUDA GPU
COMPILE_MODES = ("auto", "on", "off")
OPS_WARMUP, OPS_STEPS = 3, 5  # --ops: steps before the profiled window, steps in it
BATCH = 64
IMAGE = 32
CLASSES = 10
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def cifar_like(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Generated CIFAR-10-shaped data: uint8 (n, 32, 32, 3) HWC images, int64 (n,) labels."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, IMAGE, IMAGE, 3), dtype=np.uint8)
    return images, rng.integers(0, CLASSES, n).astype(np.int64)


def children_peak_rss_mib() -> float:
    """Largest peak RSS among this process's finished children (the DataLoader workers), MiB."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def make_model(model: str):
    """The benchmarked model, freshly initialised: the tutorials' ViT or the swin preset."""
    from vitviz.blocks import create_model
    from vitviz.training.config import PRESETS, TrainConfig
    from vitviz.training.models import build_model

    if model == "swin":
        return build_model(TrainConfig(**PRESETS["swin"]), CLASSES, 3)
    return create_model("cifar10-tutorial")


def tutorial_loop(
    steps: int, device: str, model_kind: str = "vit", after_step=None, compile_mode: str = "off"
) -> list[float]:
    """The tutorials' loop for ``steps`` steps; perf_counter after every step (and
    ``after_step(i)``, i = 1.. steps, when given). ``compile_mode``: vitviz's only."""
    import torch
    import torch.nn.functional as F
    import torchvision.transforms as T
    from PIL import Image
    from torch.utils.data import DataLoader, Dataset

    class CifarLike(Dataset):
        """Like torchvision.datasets.CIFAR10: uint8 HWC arrays, a PIL image per sample."""

        def __init__(self, images: np.ndarray, labels: np.ndarray, transform: T.Compose) -> None:
            self.images, self.labels, self.transform = images, labels, transform

        def __len__(self) -> int:
            return len(self.labels)

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])

    transform = T.Compose(
        [
            T.RandomCrop(IMAGE, padding=4),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(CIFAR_MEAN, CIFAR_STD),
        ]
    )
    images, labels = cifar_like(steps * BATCH)
    loader = DataLoader(
        CifarLike(images, labels, transform), batch_size=BATCH, shuffle=True, num_workers=2
    )
    torch.manual_seed(0)
    dev = torch.device(device)
    model = make_model(model_kind).to(dev).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stamps = [time.perf_counter()]
    for x, y in loader:
        x, y = x.to(dev), y.to(dev)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss.item()  # the tutorials log the loss every step
        stamps.append(time.perf_counter())
        if after_step is not None:
            after_step(len(stamps) - 1)
    return stamps


def vitviz_loop(
    steps: int, device: str, model_kind: str = "vit", after_step=None, compile_mode: str = "auto"
) -> list[float]:
    """vitviz.training.run_training over the same number of steps; perf_counter per step (and
    ``after_step(i)``, i = 1.. steps, when given)."""
    from vitviz.training.config import PRESETS, TrainConfig
    from vitviz.training.loop import run_training

    stamps = [time.perf_counter()]

    def record(event: object) -> None:
        if getattr(event, "kind", "") == "step":
            stamps.append(time.perf_counter())
            if after_step is not None:
                after_step(len(stamps) - 1)

    with tempfile.TemporaryDirectory() as tmp:
        preset = PRESETS["swin"] if model_kind == "swin" else {}
        cfg = TrainConfig(
            **{**preset, "image_size": IMAGE},
            dataset="random",
            train_size=steps * BATCH,
            val_size=BATCH,
            epochs=1,
            batch_size=BATCH,
            device=device,
            compile=compile_mode,
            probe=False,
            step_report_interval_s=0.0,  # an event (and a loss sync) after every step
            out_dir=str(Path(tmp) / "run"),
        )
        run_training(cfg, record)
    return stamps


def worker(
    kind: str, steps: int, warmup: int, device: str, model: str = "vit", compile_mode: str = "auto"
) -> dict:
    """Run one loop in this process; the measurement as a dict."""
    loop = tutorial_loop if kind == "tutorial" else vitviz_loop
    stamps = loop(steps, device, model, compile_mode=compile_mode)
    if len(stamps) != steps + 1:
        raise RuntimeError(f"{kind}: {len(stamps) - 1} steps recorded, expected {steps}")
    seconds = stamps[-1] - stamps[warmup]
    return {
        "kind": kind,
        "steps": steps - warmup,
        "images_per_s": (steps - warmup) * BATCH / seconds,
        "seconds": seconds,
        "peak_rss_mib": peak_rss_mib(),
        "workers_peak_rss_mib": children_peak_rss_mib(),
    }


def ops_worker(
    kind: str, steps: int, warmup: int, device: str, model: str = "vit", compile_mode: str = "off"
) -> dict:
    """Host work per step of one loop (--ops) over ``steps`` steps after ``warmup``, counted
    in this process (counts need no process of their own)."""
    import torch

    counter = StepOps(warmup, steps, torch.device(device).type == "cuda")
    loop = tutorial_loop if kind == "tutorial" else vitviz_loop
    loop(warmup + steps + 1, device, model, counter.after_step, compile_mode)
    if counter.result is None:
        raise RuntimeError(f"{kind}: the profiled steps did not run")
    return {"kind": kind, **counter.result.to_dict()}


def run_worker(
    kind: str,
    steps: int,
    warmup: int,
    device: str,
    model: str = "vit",
    compile_mode: str = "auto",
) -> dict:
    """One loop in a fresh subprocess (its own peak RSS); its JSON result."""
    cmd = [sys.executable, __file__, "--worker", kind, "--steps", str(steps)]
    cmd += ["--warmup", str(warmup), "--device", device, "--model", model]
    cmd += ["--compile", compile_mode]
    env = {**os.environ, "VITVIZ_DATA_DIR": tempfile.gettempdir()}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} loop failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def model_name(model: str) -> str:
    if model == "swin":
        return "swin preset (patch 2, window 4, 48-96-192)"
    return "cifar10-tutorial ViT"


def compiles(compile_mode: str, device) -> bool:
    """Whether vitviz's loop compiles its step with ``compile_mode`` on ``device``."""
    from vitviz.training.compiled import wants_compile

    return wants_compile(compile_mode, device)


def main_ops(args: argparse.Namespace, device) -> int:
    """--ops: the table of host work per step."""
    steps = args.steps or (2 if args.quick else OPS_STEPS)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else OPS_WARMUP)
    kinds = [("tutorial", "off"), ("vitviz", "off")]
    if compiles(args.compile, device):
        kinds.append(("vitviz", "on"))
    found = [ops_worker(k, steps, warmup, args.device, args.model, c) for k, c in kinds]
    labels = {
        ("tutorial", "off"): "(a) tutorial (main process; per-image transforms in workers)",
        ("vitviz", "off"): "(b) vitviz run_training, eager",
        ("vitviz", "on"): "(c) vitviz run_training, torch.compile",
    }
    base = found[0]["aten_ops"]
    rows = []
    for (kind, mode), r in zip(kinds, found, strict=True):
        gpu = "–" if r["gpu"] is None else f"{r['gpu']:.0f}"
        syncs = "–" if r["syncs"] is None else f"{r['syncs']:.1f}"
        ratio = f"{r['aten_ops'] / base:.2f}" if base else "–"
        rows.append([labels[(kind, mode)], f"{r['aten_ops']:.0f}", ratio, syncs, gpu])
    print(f"# Host work per training step: {model_name(args.model)}, batch {BATCH}, {args.device}")
    print(f"device: {device_name(device)}")
    print(environment())
    print(
        f"torch.profiler over steps {warmup + 1}-{warmup + steps} of each loop "
        f"(after {warmup} warm-up steps, compiling included); per step: aten operator calls "
        f"not inside another one and, on CUDA, the host's waits for the GPU and the kernels and "
        f"copies the GPU ran"
    )
    if args.quick:
        print("(--quick: a short window; the counts are indicative only)")
    print()
    headers = ["loop", "aten ops / step", "× (a)", "device syncs / step", "GPU work items / step"]
    print_table(headers, rows)
    print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (300)")
    add_device_option(p)  # both loops run there
    p.add_argument(
        "--model", choices=("vit", "swin"), default="vit", help="vit (default) or the swin preset"
    )
    p.add_argument(
        "--compile",
        nargs="?",
        const="on",
        choices=COMPILE_MODES,
        default="auto",
        help="vitviz's torch.compile mode: auto (default: CUDA only), on (--compile alone), off",
    )
    p.add_argument(
        "--ops", action="store_true", help="count the host work per step instead of timing"
    )
    p.add_argument("--worker", choices=("tutorial", "vitviz"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    steps = args.steps or (12 if args.quick else 300)
    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 20)
    if args.worker:
        result = worker(args.worker, steps, warmup, args.device, args.model, args.compile)
        print(json.dumps(result))
        return 0
    device = bench_device(args.device)  # refused here, plainly, when it is not present
    if args.ops:
        return main_ops(args, device)
    repeats = args.repeats or (1 if args.quick else 2)
    results: dict[str, list[dict]] = {"tutorial": [], "vitviz": []}
    for _ in range(repeats):  # in turns, so drift in the machine's load hits both alike
        for kind in results:
            run = run_worker(kind, steps, warmup, args.device, args.model, args.compile)
            results[kind].append(run)

    def median(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in results[kind])

    base = median("tutorial", "images_per_s")
    ratio = median("vitviz", "images_per_s") / base
    target = TARGET_CUDA if device.type == "cuda" else TARGET
    check = Check("(b) vitviz / (a) tutorial images per second", ratio, target, at_most=False)
    compiled = compiles(args.compile, device)
    labels = {
        "tutorial": "(a) tutorial: PIL transforms, DataLoader(num_workers=2)",
        "vitviz": "(b) vitviz run_training: batched uint8 augmentation"
        + (", torch.compile" if compiled else ", eager"),
    }
    rows = []
    for kind in results:
        ips = median(kind, "images_per_s")
        workers = median(kind, "workers_peak_rss_mib")
        rows.append(
            [
                labels[kind],
                f"{ips:,.0f}",
                "1.00" if kind == "tutorial" else f"{ips / base:.2f}",
                f"{median(kind, 'peak_rss_mib'):.0f} MiB",
                f"2 × {workers:.0f} MiB" if kind == "tutorial" else "none",
                "baseline" if kind == "tutorial" else check.target,
                "" if kind == "tutorial" else check.verdict,
            ]
        )
    print(
        f"# Training throughput: {model_name(args.model)}, {IMAGE} px, {CLASSES} classes, batch "
        f"{BATCH}, {args.device}, vitviz compile={args.compile}"
    )
    print(f"device: {device_name(device)}")
    print(environment())
    print(
        f"{repeats} run(s) of each loop in turns, each in its own subprocess; images/s over "
        f"{steps - warmup} steps after {warmup} warm-up steps (median of runs)"
        + (" (--quick: timings are not meaningful)" if args.quick else "")
    )
    print()
    headers = ["loop", "images/s", "× (a)", "peak RSS", "workers' peak RSS", "target", "verdict"]
    print_table(headers, rows)
    print()
    return finish([check], args.no_check)


if __name__ == "__main__":
    sys.exit(main())
