"""An 80-megapixel photograph through ``vitviz-cli explain``: reduced decoding against full size.

The photograph: skimage's astronaut (512 × 512) upscaled to 10000 × 8000 (bicubic) with seeded
noise of ±12 grey levels, saved as JPEG quality 90 (``--quick``: 4800 × 1600). The model: the
shipped 64-px shapes model. Each case runs ``vitviz.cli.main(["explain", PHOTO, "--checkpoint",
MODEL, "--out", DIR, ...])`` in a fresh Python process:

- baseline ``--full-size``: decoded at full resolution, overlays written at full size (what
  every run did before overlays were limited);
- vitviz (the default): decoded reduced (JPEG DCT scaling, then at most 4096 px on the long
  side, never below what the model input needs) and overlays of at most 4096 px;
- with ``--before DIR``: the default command run from another checkout of vitviz (e.g.
  ``git worktree add /tmp/before HEAD``), the code before the change.

The first two run with ``--bare`` (the overlays without title and colour bar), so a PNG's size
is its overlay's.

Reported per case: the command's wall time (interpreter start and imports included; median of
the repeats, the cases taking turns), its peak RSS (the child's ``ru_maxrss``), the size of the
rollout PNG, the top class and how far the model input is from the baseline's (mean |Δ| in grey
levels). Targets (not checked with ``--quick``): peak RSS of the default at most 2048 MiB, its
time at most half the baseline's. Wrong results: an overlay longer than 4096 px by default, not
the full size with ``--full-size``, another top class, or an input more than a grey level away.

    .venv/bin/python benchmarks/big_image.py [--quick] [--no-check] [--repeats N] [--before DIR]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import REPO_ROOT, Check, environment, finish, fmt_seconds, parser, print_table
from PIL import Image

SIZE, QUICK_SIZE = (10000, 8000), (4800, 1600)  # (W, H)
RSS_TARGET_MIB = 2048.0
TIME_TARGET = 0.5  # default / full size, at most
MAX_SIDE = 4096
GREY_TOLERANCE = 1.0  # mean |Δ input| in grey levels, at most

# Runs the CLI from the checkout in argv[1]; prints its status, seconds and peak RSS as JSON.
CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
start = time.perf_counter()
from vitviz.cli import main
status = main(sys.argv[2:])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
peak_mib = peak / 2**20 if sys.platform == "darwin" else peak / 1024
print(json.dumps({"status": status, "seconds": time.perf_counter() - start, "peak": peak_mib}))
"""


def make_photo(path: Path, size: tuple[int, int], seed: int = 0) -> None:
    """A real photograph upscaled to ``size`` (W, H) with seeded noise, as JPEG quality 90."""
    import skimage.data

    w, h = size
    photo = Image.fromarray(skimage.data.astronaut()).resize((w, h), Image.Resampling.BICUBIC)
    rng = np.random.default_rng(seed)
    step = 500
    for top in range(0, h, step):  # in bands, so the noise never needs a full-size array
        box = (0, top, w, min(h, top + step))
        band = np.asarray(photo.crop(box)).astype(np.int16)
        band += rng.integers(-12, 13, band.shape, dtype=np.int16)
        photo.paste(Image.fromarray(np.clip(band, 0, 255).astype(np.uint8)), box[:2])
    photo.save(path, quality=90)


def run_case(root: Path, photo: Path, model: Path, out: Path, extra: list[str]) -> dict:
    """One ``explain`` in a fresh process from the checkout ``root``: its JSON plus wall time."""
    argv = ["explain", str(photo), "--checkpoint", str(model), "--out", str(out), *extra]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), *argv],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    wall = time.perf_counter() - start
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"explain failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return {**json.loads(lines[-1]), "wall": wall}


def outputs(out: Path, stem: str) -> tuple[tuple[int, int], int, np.ndarray]:
    """(W, H) of the rollout PNG, the target class and the model input of the .npz."""
    with Image.open(out / f"{stem}_rollout.png") as im:
        size = im.size
    with np.load(out / f"{stem}.npz") as z:
        return size, int(z["target_class"]), z["input"].copy()


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, help="another vitviz checkout to run the default from")
    args = p.parse_args()
    from vitviz.checkpoints import load_checkpoint
    from vitviz.core.resources import default_model_path

    model = default_model_path()
    if model is None:
        print("the shipped model is missing (resources/models)")
        return 1
    std = np.array(load_checkpoint(model).preprocessing.std, dtype=np.float32).reshape(-1, 1, 1)
    size = QUICK_SIZE if args.quick else SIZE
    repeats = args.repeats or 1
    # --bare: the overlays alone (no title or colour bar), so their size is the overlay's
    cases = {
        "baseline --full-size": (REPO_ROOT, ["--full-size", "--bare"]),
        "vitviz": (REPO_ROOT, ["--bare"]),
    }
    if args.before:
        cases["before (--before checkout)"] = (args.before.resolve(), [])
    print(f"# vitviz-cli explain on a {size[0]} × {size[1]} JPEG, shipped 64-px model")
    print(environment())
    wrong: list[str] = []
    walls: dict[str, list[float]] = {name: [] for name in cases}
    runs: dict[str, dict] = {}
    shapes: dict[str, tuple] = {}
    with tempfile.TemporaryDirectory() as tmp:
        photo = Path(tmp) / "photo.jpg"
        make_photo(photo, size)
        megabytes = photo.stat().st_size / 2**20
        for turn in range(repeats):
            for i, (name, (root, extra)) in enumerate(cases.items()):
                out = Path(tmp) / f"out{i}-{turn}"
                result = run_case(root, photo, model, out, extra)
                walls[name].append(result["wall"])
                runs[name] = {
                    **result,
                    "peak": max(result["peak"], runs.get(name, {}).get("peak", 0)),
                }
                shapes[name] = outputs(out, photo.stem)
    _, base_class, base_input = shapes["baseline --full-size"]
    base_wall = statistics.median(walls["baseline --full-size"])
    rows, checks = [], []
    for name, (png, target, x) in shapes.items():
        grey = float(np.abs((x - base_input) * std * 255).mean())
        wall = statistics.median(walls[name])
        limited = name != "baseline --full-size" and not name.startswith("before")
        if limited and max(png) > MAX_SIDE:
            wrong.append(f"{name}: overlay {png[0]}×{png[1]} is longer than {MAX_SIDE} px")
        if name == "baseline --full-size" and png != size:
            wrong.append(f"{name}: overlay {png[0]}×{png[1]} is not the photo's {size}")
        if target != base_class:
            wrong.append(f"{name}: top class {target}, the full-size run's is {base_class}")
        if grey > GREY_TOLERANCE:
            wrong.append(f"{name}: model input {grey:.2f} grey levels from the full-size one's")
        verdict = "baseline" if name.startswith("baseline") else "info"
        if name == "vitviz":
            rss = Check("peak RSS MiB (default)", runs[name]["peak"], RSS_TARGET_MIB, True)
            speed = Check("time default / --full-size", wall / base_wall, TIME_TARGET, True)
            if not args.quick:
                checks += [rss, speed]
                verdict = f"{rss.verdict} / {speed.verdict}"
        rows.append(
            [
                name,
                fmt_seconds(wall),
                f"{wall / base_wall:.2f}",
                f"{runs[name]['peak']:.0f}",
                f"{png[0]}×{png[1]}",
                str(target),
                f"{grey:.3f}",
                verdict,
            ]
        )
    print(f"photo: {megabytes:.1f} MiB JPEG; {repeats} repeat(s), cases taking turns")
    print_table(
        [
            "case",
            "wall",
            "ratio",
            "peak RSS MiB",
            "overlay",
            "top class",
            "mean abs Δ input (grey)",
            "verdict",
        ],
        rows,
    )
    print(
        f"targets: peak RSS ≤ {RSS_TARGET_MIB:.0f} MiB and time ratio ≤ {TIME_TARGET} for the "
        "default (wall time includes the interpreter start and imports)"
    )
    return finish(checks, args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
