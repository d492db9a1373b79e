"""The engine's parts that need no Ray running: outcomes handed on in the inputs' order, the
inputs (folders, --recursive, globs, lists of paths), the progress text, the temporary files of
a killed writer swept, and the CLI's engine options checked before anything opens."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitviz.cli import main
from vitviz.cluster.driver import sweep_temporaries
from vitviz.cluster.inputs import InputError, expand_inputs
from vitviz.cluster.job import Outcome
from vitviz.cluster.ordered import InOrder
from vitviz.cluster.progress import RunProgress, eta_text


def _png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    return path


def test_outcomes_are_handed_on_in_index_order_each_once() -> None:
    order = InOrder([0, 1, 2, 3, 5])
    got = []
    for i in (3, 1, 3, 0, 0, 9, 5, 2, 1):  # repeats (a retried batch) and a stranger
        got += [o.index for o in order.add(Outcome(i, f"p{i}", {"i": i}))]
    assert got == [0, 1, 2, 3, 5]
    assert order.pending == 0 and order.missing() == []
    partial = InOrder(range(4))
    assert [o.index for o in partial.add(Outcome(2, "p2"))] == []
    assert partial.missing() == [0, 1, 2, 3]
    assert [o.index for o in partial.drain()] == [2]


def test_an_outcome_survives_its_json_round_trip() -> None:
    o = Outcome(4, "a/b.png", {"statistics": {"distance": [[1.5, float("nan")]]}}, None, 77)
    back = Outcome.from_json(o.to_json())
    assert (back.index, back.path, back.worker) == (4, "a/b.png", 77)
    assert back.record["statistics"]["distance"][0][0] == 1.5
    assert np.isnan(back.record["statistics"]["distance"][0][1])


def test_inputs_folders_recursive_globs_and_lists(tmp_path: Path) -> None:
    a = _png(tmp_path / "data" / "a2.png")
    b = _png(tmp_path / "data" / "a10.png")
    c = _png(tmp_path / "data" / "sub" / "c.png")
    _png(tmp_path / "data" / "a2_mask.png")  # a2's mask: not an input
    assert expand_inputs([tmp_path / "data"]) == [a, b]
    assert expand_inputs([tmp_path / "data"], recursive=True) == [a, b, c]
    assert expand_inputs([tmp_path / "data" / "*" / "*.png"]) == [c]
    listing = tmp_path / "list.txt"
    listing.write_text(f"# the set\n{c}\n\ndata/a10.png\n", encoding="utf-8")
    assert expand_inputs([listing]) == [c, tmp_path / "data" / "a10.png"]
    with pytest.raises(InputError, match="gives no images"):
        expand_inputs([tmp_path / "data" / "*.jpg"])


def test_progress_says_rate_and_time_left(tmp_path: Path) -> None:
    assert eta_text(59.6) == "1:00" and eta_text(3725) == "1:02:05"
    log = tmp_path / "log.txt"
    with open(log, "w") as stream:
        p = RunProgress(4, "[m] ", stream)
        p.update(1)
        p.update(4, failed=1)
    lines = log.read_text().splitlines()
    assert lines[0].startswith("[m] [") and "1/4 images" in lines[0] and "ETA" in lines[0]
    assert "4/4 images, 1 failed" in lines[-1] and "images/s" in lines[-1]


def test_only_a_killed_writers_temporaries_are_swept(tmp_path: Path) -> None:
    stray = [tmp_path / ".cat.npz.x1y2.tmp", tmp_path / ".cat_rollout.png.abc.tmp"]
    kept = [tmp_path / ".catalogue.npz.z.tmp", tmp_path / "cat.npz", tmp_path / ".dog.npz.q.tmp"]
    for f in stray + kept:
        f.write_bytes(b"x")
    assert sweep_temporaries(tmp_path, ["cat"]) == 2
    assert all(not f.exists() for f in stray) and all(f.exists() for f in kept)


def test_ray_options_with_the_local_engine_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = _png(tmp_path / "a.png")
    for extra in (["--workers", "2"], ["--resume"], ["--address", "auto"]):
        assert main(["stats", str(tmp_path), "--checkpoint", "x", *extra]) == 2
        flag = extra[0]
        assert f"vitviz-cli: {flag} is an option of --engine ray" in capsys.readouterr().err
    argv = ["explain", str(image), "--engine", "ray", "--workers", "0"]
    assert main(argv) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err


def test_without_ray_one_line_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray: ImportError
    image = _png(tmp_path / "a.png")
    for command in ("explain", "faithfulness", "stats"):
        target = str(tmp_path) if command == "stats" else str(image)
        argv = [command, target, "--checkpoint", "nowhere.safetensors", "--engine", "ray"]
        assert main([*argv, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            "vitviz-cli: --engine ray needs Ray, which is not installed: "
            "pip install 'vitviz[cluster]'"
        ]
    assert not (tmp_path / "out").exists()


class _Job:
    """A job whose model can't open (``broken``) or whose run fails on image ``bad``."""

    def __init__(self, broken: bool = False, bad: int = -1) -> None:
        self.broken, self.bad = broken, bad

    def open(self) -> str:
        if self.broken:
            raise OSError("model.safetensors: no such file on this node")
        return "model"

    def run(self, state: str, items: list) -> list[Outcome]:
        if any(it.index == self.bad for it in items):
            raise RuntimeError("CUDA error:\n  device-side assert")
        return [Outcome(it.index, it.path, {"by": state}) for it in items]

    def complete(self, item, record) -> bool:
        return False


def _batch(n: int) -> dict:
    return {
        "index": np.arange(n),
        "path": np.array([f"im{i}.png" for i in range(n)], dtype=object),
        "stem": np.array([f"im{i}" for i in range(n)], dtype=object),
    }


def test_a_worker_records_failures_instead_of_failing_the_run() -> None:
    from vitviz.cluster.ray_engine import _Worker

    rows = _Worker(_Job(bad=1))(_batch(3))["outcome"]
    got = [Outcome.from_json(r) for r in rows]
    assert [o.index for o in got] == [0, 1, 2]
    assert got[0].record == {"by": "model"} and got[2].record == {"by": "model"}
    assert got[1].error == "RuntimeError: CUDA error: device-side assert"  # one line
    broken = [Outcome.from_json(r) for r in _Worker(_Job(broken=True))(_batch(2))["outcome"]]
    why = "OSError: model.safetensors: no such file on this node"
    assert [o.error for o in broken] == [f"the worker could not open the model: {why}"] * 2


def test_the_local_engine_records_its_run_and_without_pyarrow_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run.json of the local engine (its images, each computed, the failed ones and why);
    images.parquet only with pyarrow, and one line when it is missing; a run that stops on an
    error leaves neither."""
    import json
    import os

    from vitviz.cluster.record import NO_TABLE, LocalRunFiles

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    said: list[str] = []
    with LocalRunFiles(tmp_path, "explain", said.append, 2) as files:
        files.add(Outcome(0, "a.png", {"target_class": 1}))
        files.add(Outcome(1, "b.png", None, "b.png is not an image"))
    assert said == [NO_TABLE] and "pyarrow" in NO_TABLE and "\n" not in NO_TABLE
    assert os.listdir(tmp_path) == ["run.json"]
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["engine"], run["images"], run["computed"], run["skipped"]) == ("local", 2, 2, 0)
    assert run["failed"] == [{"path": "b.png", "reason": "b.png is not an image"}]
    monkeypatch.undo()  # pyarrow back: a run stopped by an error leaves no table nor record
    (tmp_path / "x").mkdir()
    with pytest.raises(ValueError), LocalRunFiles(tmp_path / "x", "stats", said.append, 1) as f:
        f.add(Outcome(0, "a.png", {"target_class": 1}))
        raise ValueError("a bad option found late")
    assert not list((tmp_path / "x").iterdir()) and len(said) == 1


def test_ray_is_started_with_its_notices_kept_off_the_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local Ray started for a run: its workers' lines stay in its log files, its logger
    says errors only (its notices, e.g. on token authentication, not), the dashboard's
    address is said, and it stops at the end."""
    import logging
    from types import SimpleNamespace

    import vitviz.cluster.ray_engine as engine

    calls: dict = {}

    class FakeRay:  # what ray_session asks of the ray module
        def is_initialized(self) -> bool:
            return False

        def init(self, address=None, **options):
            calls.update(options, address=address)
            return SimpleNamespace(dashboard_url="127.0.0.1:8265")

        def shutdown(self) -> None:
            calls["shutdown"] = True

    monkeypatch.setattr(engine, "import_ray", FakeRay)
    said: list[str] = []
    with engine.ray_session(engine.RayOptions(), said.append):
        assert "shutdown" not in calls
    assert calls["log_to_driver"] is False and calls["logging_level"] == logging.ERROR
    assert calls["configure_logging"] is True and calls["address"] is None
    assert said == ["Ray dashboard: http://127.0.0.1:8265"] and calls["shutdown"]


def test_workers_are_one_per_share_of_the_gpus_and_none_without_gpus() -> None:
    from types import SimpleNamespace

    from vitviz.cluster.ray_engine import RayOptions, worker_count
    from vitviz.core.errors import VitvizError

    def cluster(**resources):
        return SimpleNamespace(cluster_resources=lambda: resources)

    assert worker_count(cluster(CPU=16, GPU=4), RayOptions(gpus_per_worker=0.5)) == 8
    assert worker_count(cluster(CPU=16), RayOptions()) == 4  # one per 4 CPUs
    assert worker_count(cluster(CPU=16), RayOptions(workers=3, gpus_per_worker=1)) == 3
    with pytest.raises(VitvizError, match="asks for 1 GPU and the cluster has 0"):
        worker_count(cluster(CPU=16), RayOptions(gpus_per_worker=1))  # would wait forever
