"""explain on the Ray engine against the local engine, in the same run (DESIGN §7).

A small random ViT (64 px input, patch 8, width 64, depth 4, 4 heads) and generated 96 × 80 PNG
images; measured:

  (a) baseline: ``vitviz-cli explain FOLDER --batch-size B`` on the local engine (this
      process), images per second in the steady state (first image written to last);
  (b) the same on Ray with 1 worker (one local Ray of 2 CPUs started once), steady state
      (first image finished on a worker to the last, by the workers' clocks: the actor's start,
      torch imported and the model opened, is shown apart as "start", until the first image);
  (c) Ray with 2 workers: the scaling over (b);
  (d) the driver's peak memory (resident set, its own process) for ``stats --engine ray``
      over 200 and over 2,000 images, each in a fresh process that starts its own Ray.

(a), (b) and (c) interleaved, ``--repeats`` times (3), the median run shown.
Targets: (b) ≥ 0.85 × (a) images/s (Ray's overhead ≤ 15 %); (d) peak at 2,000 ≤ 1.2 × peak at
200. The 2-worker scaling is recorded (on a 2-core machine shared with other work it cannot be
2×).

    .venv/bin/python benchmarks/ray_scale.py [--quick] [--no-check] [--images N]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import Check, parser, print_table
from PIL import Image

MODEL = dict(image_size=64, patch_size=8, dim=64, depth=4, heads=4, num_classes=10)


def make_model(folder: Path) -> Path:
    import torch

    from vitviz.blocks import VisionTransformer, ViTConfig
    from vitviz.checkpoints import save_checkpoint

    torch.manual_seed(0)
    model = VisionTransformer(ViTConfig(**MODEL)).eval()
    names = [f"class {i}" for i in range(MODEL["num_classes"])]
    return save_checkpoint(model, folder / "bench.safetensors", class_names=names)


def make_images(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (80, 96, 3), dtype=np.uint8)
    for i in range(n):
        Image.fromarray(np.roll(base, i, axis=1)).save(folder / f"im{i:05d}.png")
    return folder


def steady_rate(stamps: list[float]) -> float:
    """Images per second from the first image done to the last."""
    return (len(stamps) - 1) / max(1e-9, stamps[-1] - stamps[0])


def local_rate(images: Path, model: Path, out: Path, batch: int) -> tuple[float, float]:
    """(steady images/s, wall seconds) of explain on the local engine, in this process."""
    import vitviz.cli.explain_batch as explain_batch
    from vitviz.cli import main

    stamps: list[float] = []
    said = explain_batch.say

    def stamp(message: str) -> None:
        if message.startswith("["):  # one line per image written
            stamps.append(time.time())

    explain_batch.say = stamp
    try:
        t0 = time.perf_counter()
        code = main(["explain", str(images), "--checkpoint", str(model), "--out", str(out),
                     "--batch-size", str(batch)])  # fmt: skip
        wall = time.perf_counter() - t0
    finally:
        explain_batch.say = said
    assert code == 0, f"local explain exited {code}"
    return steady_rate(stamps), wall


def ray_rate(images: Path, model: Path, out: Path, batch: int, workers: int) -> tuple:
    """(steady images/s, start seconds, wall seconds) of explain on Ray with ``workers``."""
    from vitviz.cli.common import load_for
    from vitviz.cli.explain import model_settings
    from vitviz.cli.on_ray import ExplainJob, image_items
    from vitviz.cli.parser import build_parser
    from vitviz.cluster.driver import RayRun
    from vitviz.cluster.ray_engine import RayOptions
    from vitviz.imaging.loading import list_images

    argv = ["explain", str(images), "--checkpoint", str(model), "--out", str(out)]
    args = build_parser().parse_args([*argv, "--batch-size", str(batch)])
    out.mkdir(parents=True, exist_ok=True)
    job = ExplainJob(args, model_settings(args, load_for(args), "cpu"))
    items = image_items(list_images(images))
    stamps: list[float] = []
    t0 = time.perf_counter()
    with RayRun("explain", out, RayOptions(workers=workers, images_per_task=batch), print) as r:
        for o in r.outcomes(job, items):
            assert o.error is None, o.error
            stamps.append(o.finished)  # when the worker finished the image
    wall = time.perf_counter() - t0
    stamps.sort()
    return steady_rate(stamps), stamps[0] - (time.time() - wall), wall


def driver_memory(n: int, model: Path, root: Path) -> float:
    """Peak resident memory (MiB) of a fresh driver running stats --engine ray over n images."""
    images = make_images(root / f"mem{n}", n)
    code = (
        "import json, resource, sys; from vitviz.cli import main; "
        f"c = main(['stats', {str(images)!r}, '--checkpoint', {str(model)!r}, '--out', "
        f"{str(root / f'mem{n}-out')!r}, '--engine', 'ray', '--workers', '2', "
        "'--batch-size', '16']); "
        "print(json.dumps({'code': c, 'peak': resource.getrusage(resource.RUSAGE_SELF)"
        ".ru_maxrss / 1024}))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if not line.startswith("{"):
        raise SystemExit(f"stats over {n} images failed:\n{done.stderr[-2000:]}")
    result = json.loads(line)
    assert result["code"] == 0, result
    return float(result["peak"])


def median_run(runs: list[tuple]) -> tuple:
    """The run of the median rate (the first of the middle two for an even count)."""
    ordered = sorted(runs, key=lambda r: r[0])
    return ordered[(len(ordered) - 1) // 2]


def main() -> int:
    p = parser(__doc__.split("\n", 1)[0])
    p.add_argument("--images", type=int, default=240, help="images of the throughput runs")
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    n = 24 if args.quick else max(2, args.images)
    repeats = args.repeats or (1 if args.quick else 3)
    small, large = (20, 60) if args.quick else (200, 2000)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import ray
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="vitviz-ray-") as tmp:
        root = Path(tmp)
        model = make_model(root)
        images = make_images(root / "images", n)
        runs: dict[str, list[tuple]] = {"local": [], "one": [], "two": []}
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:  # interleaved, so a change of the machine's load touches each engine alike
            for r in range(repeats):
                runs["local"].append(local_rate(images, model, root / f"l{r}", args.batch_size))
                runs["one"].append(ray_rate(images, model, root / f"a{r}", args.batch_size, 1))
                runs["two"].append(ray_rate(images, model, root / f"b{r}", args.batch_size, 2))
        finally:
            ray.shutdown()
        local, local_wall = median_run(runs["local"])
        one, one_start, one_wall = median_run(runs["one"])
        two, two_start, two_wall = median_run(runs["two"])
        mem_small = driver_memory(small, model, root)
        mem_large = driver_memory(large, model, root)
    rows = [
        ["(a) local engine (baseline)", f"{local:.1f}", "–", f"{local_wall:.1f} s", "1.00"],
        ["(b) Ray, 1 worker", f"{one:.1f}", f"{one_start:.1f} s", f"{one_wall:.1f} s",
         f"{one / local:.2f}"],
        ["(c) Ray, 2 workers", f"{two:.1f}", f"{two_start:.1f} s", f"{two_wall:.1f} s",
         f"{two / local:.2f}"],
    ]  # fmt: skip
    print(f"\nexplain over {n} images, batch {args.batch_size}, model {MODEL}, median of {repeats}")
    print_table(["engine", "images/s (steady)", "start", "wall", "× (a)"], rows)
    print("\nstats --engine ray (2 workers), driver peak resident memory")
    print_table(
        ["images", "driver peak"],
        [[f"{small}", f"{mem_small:.0f} MiB"], [f"{large}", f"{mem_large:.0f} MiB"]],
    )
    checks = [
        Check("Ray 1 worker / local, images/s", one / local, 0.85, at_most=False),
        Check(f"driver peak {large} / {small} images", mem_large / mem_small, 1.2, at_most=True),
    ]
    print()
    print_table(
        ["target", "ratio", "limit", "verdict"],
        [[c.name, f"{c.ratio:.2f}", c.target, c.verdict] for c in checks],
    )
    print(f"\n2 workers / 1 worker: {two / one:.2f}× (recorded; {os.cpu_count()} CPU cores)")
    return 0 if args.no_check or all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
