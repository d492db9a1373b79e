"""explain, stats and faithfulness on one local Ray (2 CPUs, started once for the module) give
the local engine's files; run.json and images.parquet say what ran; --resume recomputes only
what is missing and leaves the rest untouched; Ctrl+C leaves complete files that --resume
continues; a worker killed by its PID mid-run is restarted and every image is written once; a
bad image is recorded under ``failed`` and the run goes on."""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import ray
from conftest import CLASS_NAMES, random_vit
from PIL import Image

from vitviz.checkpoints import save_checkpoint
from vitviz.cli import main
from vitviz.cli.common import load_for
from vitviz.cli.explain import model_settings
from vitviz.cli.on_ray import ExplainJob, image_items
from vitviz.cli.parser import build_parser
from vitviz.cluster.driver import RayRun
from vitviz.cluster.ray_engine import RayOptions
from vitviz.imaging.loading import list_images

SUMMARIES = {"run.json", "images.parquet"}


@contextlib.contextmanager
def _one_at_a_time(lock: Path) -> Iterator[None]:
    """An exclusive lock on ``lock`` for the block: pytest-xdist's workers share the folder
    above their temporary folders, so the workers that run these tests take turns."""
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory):
    """One local Ray for the module (the commands join it rather than start their own), and
    one on the machine: a second xdist worker waits until the first has shut its Ray down."""
    with _one_at_a_time(tmp_path_factory.getbasetemp().parent / "vitviz-ray.lock"):
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            yield ray
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    return save_checkpoint(random_vit(), folder / "tiny.safetensors", class_names=CLASS_NAMES)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory, photo_files: dict[str, Path]) -> Path:
    """Three photos, four noise images of other sizes and a file that is not an image."""
    folder = tmp_path_factory.mktemp("images")
    for p in photo_files.values():
        shutil.copy(p, folder / p.name)
    rng = np.random.default_rng(3)
    for i, (h, w) in enumerate(((50, 64), (32, 32), (70, 40), (33, 90))):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"n{i}.png")
    (folder / "broken.png").write_bytes(b"not a png at all")
    return folder


def _run(argv: list[str]) -> int:
    return main(argv)


@pytest.fixture(scope="module")
def explained(ray_cluster, model_file: Path, images: Path, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("explained")
    argv = ["explain", str(images), "--checkpoint", str(model_file), "--method", "attention"]
    local = _run([*argv, "--out", str(out / "local")])
    on_ray = [*argv, "--out", str(out / "ray"), "--engine", "ray", "--workers", "2"]
    remote = _run([*on_ray, "--batch-size", "2"])
    return {"out": out, "codes": (local, remote), "argv": on_ray}


def _same_npz(a: Path, b: Path) -> None:
    with np.load(a, allow_pickle=False) as x, np.load(b, allow_pickle=False) as y:
        assert list(x.keys()) == list(y.keys()), a.name
        for k in x:
            if x[k].dtype.kind == "f":
                np.testing.assert_allclose(y[k], x[k], rtol=0, atol=1e-5, err_msg=f"{a.name} {k}")
            else:
                assert np.array_equal(x[k], y[k]), f"{a.name} {k}"


def _close(x, y) -> bool:
    """Equal, numbers within 1e-5 (NaN equal to NaN), through lists and dicts."""
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_close(x[k], y[k]) for k in x)
    if isinstance(x, list):
        return isinstance(y, list) and len(x) == len(y) and all(map(_close, x, y))
    if isinstance(x, float) and isinstance(y, float):
        return (x != x and y != y) or abs(x - y) <= 1e-5
    return x == y


def _same_summaries(local: Path, remote: Path) -> None:
    """Both engines' run.json with the same keys and counts, and their images.parquet with the
    same columns and rows (numbers within 1e-5; the record each row carries too)."""
    a, b = (json.loads((f / "run.json").read_text()) for f in (local, remote))
    assert list(a) == list(b) and (a["engine"], b["engine"]) == ("local", "ray")
    assert (a["workers"], a["ray_version"], a["skipped"], a["interrupted"]) == (1, None, 0, False)
    for key in ("command", "images", "computed", "failed"):
        assert a[key] == b[key], key
    assert a["seconds"] > 0 and a["images_per_second"] > 0
    x, y = (pq.read_table(f / "images.parquet") for f in (local, remote))
    assert x.schema == y.schema and x.num_rows == y.num_rows == a["images"]
    for row, other in zip(x.to_pylist(), y.to_pylist(), strict=True):
        record, other_record = row.pop("record"), other.pop("record")
        assert _close(row, other), (row, other)
        assert (record is None) == (other_record is None) == (row["status"] == "failed")
        assert record is None or _close(json.loads(record), json.loads(other_record))


def _same_files(local: Path, remote: Path) -> None:
    names = {p.name for p in local.iterdir()} - SUMMARIES
    assert {p.name for p in remote.iterdir()} == names | SUMMARIES
    for name in names:
        if name.endswith(".npz"):
            _same_npz(local / name, remote / name)
        else:
            x = np.asarray(Image.open(local / name), np.int16)
            y = np.asarray(Image.open(remote / name), np.int16)
            assert x.shape == y.shape and np.abs(x - y).max() <= 1, name


def test_explain_on_ray_writes_the_local_files_and_records_the_run(explained, images) -> None:
    assert explained["codes"] == (1, 1)  # both: one image failed, the others written
    local, remote = explained["out"] / "local", explained["out"] / "ray"
    _same_files(local, remote)
    _same_summaries(local, remote)
    assert len(list(local.glob("*.npz"))) == 7
    run = json.loads((remote / "run.json").read_text())
    assert run["engine"] == "ray" and run["workers"] == 2 and run["ray_version"] == ray.__version__
    assert (run["images"], run["computed"], run["skipped"]) == (8, 8, 0)
    assert [f["path"] for f in run["failed"]] == [str(images / "broken.png")]
    assert "not an image" in run["failed"][0]["reason"] and "\n" not in run["failed"][0]["reason"]
    assert run["seconds"] > 0 and run["images_per_second"] > 0 and not run["interrupted"]
    table = pq.read_table(remote / "images.parquet").to_pylist()
    assert [r["path"] for r in table] == [str(p) for p in list_images(images)]  # in order
    for row in table:
        if row["status"] == "failed":
            assert "not an image" in row["error"] and row["top5_classes"] is None
            continue
        with np.load(remote / f"{Path(row['path']).stem}.npz") as npz:
            probs = npz["probs"]
            assert row["target_class"] == int(npz["target_class"])
            assert row["top5_classes"] == list(np.argsort(-probs, kind="stable")[:5])
            np.testing.assert_allclose(row["top5_probs"], np.sort(probs)[::-1], atol=1e-6)
            np.testing.assert_allclose(row["distance"], npz["mean_distance"], atol=1e-5)
            np.testing.assert_allclose(row["entropy"], npz["entropy"], atol=1e-5)


def _explain_job(out: Path, model_file: Path, images: Path, *extra: str) -> ExplainJob:
    argv = ["explain", str(images), "--checkpoint", str(model_file), "--out", str(out), *extra]
    args = build_parser().parse_args([*argv, "--batch-size", "1"])
    out.mkdir(parents=True, exist_ok=True)
    return ExplainJob(args, model_settings(args, load_for(args), "cpu"))


def _noise_folder(folder: Path, n: int) -> list[Path]:
    folder.mkdir()
    rng = np.random.default_rng(5)
    paths = []
    for i in range(n):
        paths.append(folder / f"im{i:02d}.png")
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(paths[-1])
    return paths


def test_a_worker_killed_by_its_pid_is_restarted_and_each_image_written_once(
    ray_cluster, model_file: Path, tmp_path: Path
) -> None:
    paths = _noise_folder(tmp_path / "images", 10)
    out = tmp_path / "out"
    job = _explain_job(out, model_file, tmp_path / "images")
    seen, killed = [], None
    with RayRun("explain", out, RayOptions(workers=2, images_per_task=1), lambda _: None) as run:
        for o in run.outcomes(job, image_items(paths)):
            seen.append(o)
            if killed is None:
                killed = o.worker
                os.kill(killed, signal.SIGKILL)  # the worker process, mid-run
    assert killed and [o.index for o in seen] == list(range(10))
    assert all(o.error is None for o in seen)
    assert len({o.worker for o in seen} - {killed}) >= 1  # the others: a live or restarted one
    stems = [p.stem for p in paths]
    expected = {f"{s}{end}" for s in stems for end in (".npz", "_rollout.png", "_relevance.png")}
    expected |= {f"{s}_heads.png" for s in stems} | SUMMARIES
    assert {p.name for p in out.iterdir()} == expected  # each once, no temporary left
    for s in stems:
        with np.load(out / f"{s}.npz") as npz:
            assert npz["attention"].shape[0] == 2  # complete
    run_record = json.loads((out / "run.json").read_text())
    assert run_record["computed"] == 10 and run_record["failed"] == []


def test_ctrl_c_leaves_complete_files_and_resume_recomputes_only_what_is_missing(
    explained, model_file: Path, images: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    job = _explain_job(out, model_file, images, "--method", "attention")
    got = []
    options = RayOptions(workers=1, images_per_task=1)
    with pytest.raises(KeyboardInterrupt), RayRun("explain", out, options, print) as r:
        for o in r.outcomes(job, image_items(list_images(images))):
            got.append(o.index)
            if len(got) == 4:
                raise KeyboardInterrupt  # Ctrl+C
    run = json.loads((out / "run.json").read_text())
    assert run["interrupted"] and run["computed"] >= 4
    done = sorted(out.glob("*.npz"))
    assert len(done) >= 3 and not list(out.glob(".*.tmp"))
    for f in done:
        with np.load(f) as npz:
            assert npz["attention"].shape[0] == 2  # complete files only
    deleted = done[0].stem  # and one finished image's outputs deleted
    for f in out.glob(f"{deleted}[._]*"):
        f.unlink()
    complete = {f.stem for f in out.glob("*.npz")}  # an image's npz is written last

    def finished(name: str) -> bool:  # a file of an image whose outputs are all written
        return any(name == f"{s}.npz" or name.startswith(f"{s}_") for s in complete)

    # (PNGs of the image Ctrl+C stopped before its npz are made again: not "finished")
    kept = {p.name: p.stat() for p in out.iterdir() if p.name not in SUMMARIES and finished(p.name)}
    argv = [a if a != str(explained["out"] / "ray") else str(out) for a in explained["argv"]]
    argv[argv.index("--workers") + 1] = "1"  # an actor fewer to start (two: the explain test's)
    assert _run([*argv, "--resume"]) == 1  # the broken image fails again
    run = json.loads((out / "run.json").read_text())
    assert run["images"] == 8 and run["skipped"] == len(done) - 1
    assert run["computed"] == 8 - run["skipped"] and not run["interrupted"]
    for name, before in kept.items():  # finished files untouched
        after = (out / name).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), name
    _same_files(explained["out"] / "local", out)
    table = pq.read_table(out / "images.parquet").to_pylist()
    status = [r["status"] for r in table]
    assert status.count("failed") == 1 and status.count("ok") >= 7 - len(done)
    assert status.count("ok") + status.count("skipped") == 7  # skipped: files without a row
    assert all(r["top5_classes"] for r in table if r["status"] == "ok")  # rows of the table


def test_stats_on_ray_equal_the_local_engine(ray_cluster, model_file, images, tmp_path) -> None:
    """Two checkpoints of two kinds (a ViT and a Swin, whose blocks have different numbers of
    heads and no prefix tokens), each reduced in the images' order."""
    import torch
    from swin_helpers import tiny_torchvision_swin

    swin = tmp_path / "swin.pth"
    torch.save(tiny_torchvision_swin(seed=3).state_dict(), swin)
    argv = ["stats", str(images), "--checkpoint", str(model_file), "--checkpoint", str(swin)]
    assert _run([*argv, "--out", str(tmp_path / "local")]) == 1  # the broken image
    on_ray = [*argv, "--out", str(tmp_path / "ray"), "--engine", "ray", "--batch-size", "3"]
    assert _run(on_ray) == 1
    rows = []
    for engine in ("local", "ray"):
        with open(tmp_path / engine / "stats.csv", newline="") as f:
            rows.append(list(csv.reader(f)))
    assert rows[0][0] == rows[1][0] and len(rows[0]) == len(rows[1])
    kinds = {r[0] for r in rows[0][1:]}
    assert kinds == {str(model_file), str(swin)}
    for a, b in zip(rows[0][1:], rows[1][1:], strict=True):
        assert a[:4] == b[:4]  # checkpoint, layer, head, images
        got, want = np.array(b[4:], float), np.array(a[4:], float)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, equal_nan=True)
    assert {r[3] for r in rows[0][1:]} == {"7"}  # the images analysed
    _same_summaries(tmp_path / "local", tmp_path / "ray")
    assert (tmp_path / "ray" / "stats.png").is_file()
    table = pq.read_table(tmp_path / "ray" / "images.parquet").to_pylist()
    assert [r["checkpoint"] for r in table] == [str(model_file)] * 8 + [str(swin)] * 8
    ok = [np.asarray(r["distance"]) for r in table[:8] if r["status"] == "ok"]
    first = next(r for r in rows[1][1:] if r[0] == str(model_file))
    assert len(ok) == 7 and abs(np.mean([d[0, 0] for d in ok]) - float(first[4])) < 1e-5


def test_faithfulness_on_ray_equals_the_local_engine(ray_cluster, model_file, tmp_path) -> None:
    samples = Path(__file__).resolve().parents[2] / "resources" / "samples"
    folder = tmp_path / "images"
    folder.mkdir()
    for name in ("arrow", "circle", "cross"):
        for suffix in (".png", "_mask.png"):
            shutil.copy(samples / f"{name}{suffix}", folder / f"{name}{suffix}")
    (folder / "zz_broken.png").write_bytes(b"\x89PNG broken")
    files = [str(p) for p in sorted(folder.iterdir())]  # the masks among them: used as masks
    argv = ["faithfulness", *files, "--checkpoint", str(model_file), "--steps", "4"]
    argv += ["--method", "rollout", "attention", "random"]
    assert _run([*argv, "--out", str(tmp_path / "local")]) == 1
    assert _run([*argv, "--out", str(tmp_path / "ray"), "--engine", "ray", "--workers", "1"]) == 1
    a = json.loads((tmp_path / "local" / "faithfulness.json").read_text())
    b = json.loads((tmp_path / "ray" / "faithfulness.json").read_text())
    assert len(a["images"]) == 3 and "mass_in_mask" in a["summary"]["rollout"]

    def numbers(x):
        if isinstance(x, dict):
            return {k: numbers(v) for k, v in x.items()}
        if isinstance(x, list):
            return [numbers(v) for v in x]
        return pytest.approx(x, abs=1e-5) if isinstance(x, float) else x

    assert b == numbers(a)
    assert (tmp_path / "ray" / "faithfulness.csv").read_text().splitlines()[0] == (
        (tmp_path / "local" / "faithfulness.csv").read_text().splitlines()[0]
    )
    table = pq.read_table(tmp_path / "ray" / "images.parquet").to_pylist()
    first = next(r for r in table if r["path"].endswith("arrow.png"))
    curves = a["images"][0]["methods"]
    assert first["deletion_auc_rollout"] == pytest.approx(curves["rollout"]["deletion_auc"])
    assert first["insertion_auc_attention"] == pytest.approx(curves["attention"]["insertion_auc"])
    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert run["command"] == "faithfulness" and len(run["failed"]) == 1
    _same_summaries(tmp_path / "local", tmp_path / "ray")


# (faithfulness, ablate and compare run on one worker: an actor fewer to start; the outcomes of
# two workers in the inputs' order are the explain and killed-worker tests')


def _noise_images(folder: Path, names: list[str], seed: int) -> list[Path]:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i, name in enumerate(names):
        paths.append(folder / name)
        size = (32 + 8 * i, 40)
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(paths[-1])
    return paths


def test_ablate_on_ray_writes_the_local_files(ray_cluster, model_file, tmp_path) -> None:
    """Each image's effects written by a worker (``ablate_image``, the local command's), the
    summary reduced on the driver in the images' order: the same files."""
    folder = tmp_path / "images"
    _noise_images(folder, ["a.png", "b.png", "c.png"], seed=7)
    (folder / "d_broken.png").write_bytes(b"not a png at all")
    argv = ["ablate", str(folder), "--checkpoint", str(model_file), "--ablation", "mean"]
    assert _run([*argv, "--out", str(tmp_path / "local")]) == 1  # the broken image
    on_ray = [*argv, "--out", str(tmp_path / "ray"), "--engine", "ray", "--workers", "1"]
    assert _run(on_ray) == 1
    _same_files(tmp_path / "local", tmp_path / "ray")
    _same_summaries(tmp_path / "local", tmp_path / "ray")
    with np.load(tmp_path / "ray" / "ablation_summary.npz") as npz:
        assert list(npz["images"]) == ["a.png", "b.png", "c.png"]  # the images' order
        assert npz["head_effect_mean"].shape == (2, 2)
    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert run["command"] == "ablate" and (run["images"], run["computed"]) == (4, 4)
    assert [f["path"] for f in run["failed"]] == [str(folder / "d_broken.png")]
    (tmp_path / "ray" / "b_ablation.npz").unlink()  # --resume recomputes only that one
    kept = (tmp_path / "ray" / "a_ablation.npz").stat()
    assert _run([*on_ray, "--resume"]) == 1
    after = (tmp_path / "ray" / "a_ablation.npz").stat()
    assert (after.st_ino, after.st_mtime_ns) == (kept.st_ino, kept.st_mtime_ns)
    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert (run["skipped"], run["computed"]) == (2, 2)
    _same_files(tmp_path / "local", tmp_path / "ray")


def test_compare_on_ray_writes_the_local_files(ray_cluster, model_file, tmp_path) -> None:
    """Single images written by the workers and a folder's mean reduced on the driver in its
    images' order (``compare_image`` and ``write_mean``, the local command's): the same files."""
    other = save_checkpoint(random_vit(seed=4), tmp_path / "other.safetensors")
    singles = _noise_images(tmp_path / "singles", ["one.png", "two.jpg"], seed=8)
    _noise_images(tmp_path / "set", ["p.png", "q.png", "r.png"], seed=9)
    (tmp_path / "set" / "s_broken.png").write_bytes(b"not a png at all")
    argv = ["compare", *map(str, singles), str(tmp_path / "set")]
    argv += ["--checkpoint", str(model_file), "--checkpoint", str(other)]
    assert _run([*argv, "--out", str(tmp_path / "local")]) == 1  # the broken image
    on_ray = [*argv, "--out", str(tmp_path / "ray"), "--engine", "ray", "--workers", "1"]
    assert _run(on_ray) == 1
    _same_files(tmp_path / "local", tmp_path / "ray")
    _same_summaries(tmp_path / "local", tmp_path / "ray")
    assert {p.name for p in (tmp_path / "local").iterdir()} == {
        "one_compare.npz", "one_compare.png", "two_compare.npz", "two_compare.png",
        "set_compare.npz",
    } | SUMMARIES  # fmt: skip
    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert run["command"] == "compare" and (run["images"], len(run["failed"])) == (6, 1)


def test_the_windows_folder_statistics_on_a_cluster_equal_the_local_ones(
    ray_cluster, model_file, images
) -> None:
    """The window's "Over a folder…" with a cluster address: the same means, the same progress
    (each image, in order)."""
    from vitviz.workers.folder_stats import folder_stats_job

    local_steps, ray_steps = [], []
    local = folder_stats_job(model_file, images, lambda *a: local_steps.append(a), lambda: False)
    on_ray = folder_stats_job(
        model_file, images, lambda *a: ray_steps.append(a), lambda: False, address="auto"
    )
    assert ray_steps == local_steps == [(i, 8) for i in range(1, 9)]
    assert (on_ray.images, len(on_ray.failed)) == (local.images, len(local.failed)) == (7, 1)
    for name in ("distance", "entropy", "prefix_share", "distance_std", "entropy_std"):
        np.testing.assert_allclose(getattr(on_ray, name), getattr(local, name), atol=1e-5)
    # (Cancel on a cluster: run_on_cluster's, tested with the Faithfulness panel's run below)


def test_the_windows_folder_faithfulness_on_a_cluster_equals_the_local_one(
    ray_cluster, model_file, tmp_path, capfd
) -> None:
    """The Faithfulness panel's "Over a folder…" with a cluster address: the same mean curves,
    AUCs and localisation numbers as on this computer (the command's job on both engines), the
    same progress (each image, in order), no bar of the CLI's on the terminal, and Cancel stops
    the run."""
    from vitviz.workers.folder_faithfulness import folder_faithfulness_job
    from vitviz.workers.folder_stats import RunCancelledError

    samples = Path(__file__).resolve().parents[2] / "resources" / "samples"
    folder = tmp_path / "images"
    folder.mkdir()
    for name in ("arrow", "circle"):
        for suffix in (".png", "_mask.png"):
            shutil.copy(samples / f"{name}{suffix}", folder / f"{name}{suffix}")
    (folder / "zz_broken.png").write_bytes(b"not a png at all")
    options = {"method": "rollout", "params": {"discard_ratio": 0.5}, "steps": 3}
    steps: dict[str, list] = {"local": [], "ray": []}
    local = folder_faithfulness_job(model_file, folder, lambda *a: steps["local"].append(a),
                                    lambda: False, **options)  # fmt: skip
    on_ray = folder_faithfulness_job(model_file, folder, lambda *a: steps["ray"].append(a),
                                     lambda: False, address="auto", **options)  # fmt: skip
    assert steps["ray"] == steps["local"] == [(1, 3), (2, 3), (3, 3)]
    assert "images/s" not in capfd.readouterr().err  # the window shows its own progress
    assert (on_ray.images, on_ray.masked, on_ray.on_cluster) == (2, 2, "auto")
    assert (local.images, local.masked, local.on_cluster) == (2, 2, None)
    assert on_ray.failed == local.failed and "not an image" in local.failed[0]
    assert set(on_ray.curves) == set(local.curves) == {"rollout", "random"}
    for name, want in local.curves.items():
        got = on_ray.curves[name]
        assert len(got.deletion) == 4  # p_0 … p_3
        np.testing.assert_allclose(got.deletion, want.deletion, rtol=0, atol=1e-5)
        np.testing.assert_allclose(got.insertion, want.insertion, rtol=0, atol=1e-5)
        for key in ("deletion_auc", "insertion_auc", "mass_in_mask"):
            assert getattr(got, key) == pytest.approx(getattr(want, key), abs=1e-5), key
    assert on_ray.pointing == local.pointing and set(local.pointing) == {"rollout", "random"}
    stopped: list = []
    with pytest.raises(RunCancelledError):
        folder_faithfulness_job(model_file, folder, lambda *a: stopped.append(a),
                                lambda: len(stopped) >= 1, address="auto",
                                **options)  # fmt: skip
    assert stopped == [(1, 3)]  # stopped at the Cancel, after the first image
