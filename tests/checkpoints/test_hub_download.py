"""A model id downloads from a hub (a stand-in on 127.0.0.1, ``tests/hub_standin.py``) into the
standard cache: only the files vitviz reads, resumed after a broken connection or a cancel,
each fault one line naming the id, nothing half-written that the next open would trust."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from hub_standin import TOKEN, StandinHub, StandinRepo, tiny_vit_files

from vitviz.checkpoints import CheckpointError, hub_fetch, load_checkpoint
from vitviz.checkpoints.hub_fetch import (
    DownloadCancelledError,
    cached_target,
    fetch,
    hub_settings,
    plan_download,
)
from vitviz.checkpoints.hub_files import RepoFile, choose_files

COMMIT = "1234567890abcdef1234567890abcdef12345678"
NEEDED = {"config.json", "preprocessor_config.json", "model.safetensors"}


@pytest.fixture(scope="module")
def vit_files() -> dict[str, bytes]:
    return tiny_vit_files()


@pytest.fixture
def hub(vit_files: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    only_bin = {k: v for k, v in vit_files.items() if k in ("config.json", "pytorch_model.bin")}
    code_config = {**json.loads(vit_files["config.json"]), "auto_map": {"AutoModel": "m.Tiny"}}
    remote = {
        "config.json": json.dumps(code_config).encode(),
        "m.py": b"import os\n",
        "model.safetensors": vit_files["model.safetensors"],
    }
    repos = [
        StandinRepo("org/tiny-vit", dict(vit_files), COMMIT),
        StandinRepo("org/bin-only", only_bin, COMMIT),
        StandinRepo("org/remote-code", remote, COMMIT),
        StandinRepo("org/gated-vit", dict(vit_files), COMMIT, gated=True),
        StandinRepo("org/damaged", dict(vit_files), COMMIT, damaged={"model.safetensors"}),
    ]
    for name in ("HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)  # a model id is not a relative path here
    with StandinHub(repos) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def _repo_folder(tmp_path: Path, repo_id: str) -> Path:
    return tmp_path / "hf" / "hub" / ("models--" + repo_id.replace("/", "--"))


def _logits(loaded) -> torch.Tensor:
    torch.manual_seed(1)
    with torch.no_grad():
        return loaded.model(torch.randn(1, 3, 32, 32))


def _one_line(exc: pytest.ExceptionInfo[CheckpointError], *words: str) -> str:
    msg = str(exc.value)
    assert "\n" not in msg, msg
    for word in words:
        assert word in msg, (word, msg)
    return msg


def test_an_id_downloads_only_what_vitviz_reads_then_opens_from_the_cache(
    hub: StandinHub, tmp_path: Path, vit_files: dict[str, bytes]
) -> None:
    loaded = load_checkpoint("org/tiny-vit")
    repo = _repo_folder(tmp_path, "org/tiny-vit")
    snap = repo / "snapshots" / COMMIT
    assert loaded.path == snap
    assert {p.name for p in snap.iterdir()} == NEEDED
    assert all((snap / n).is_symlink() for n in NEEDED)  # into blobs/, as the hub's cache
    assert (repo / "refs" / "main").read_text() == COMMIT
    assert hub.files_served("org/tiny-vit") == NEEDED
    assert hub.bytes_served() == sum(len(vit_files[n]) for n in NEEDED)
    folder = tmp_path / "plain"
    folder.mkdir()
    for name in NEEDED:
        (folder / name).write_bytes(vit_files[name])
    torch.testing.assert_close(_logits(loaded), _logits(load_checkpoint(folder)), rtol=0, atol=0)

    asked = len(hub.requests)
    again = load_checkpoint("org/tiny-vit")  # a cache hit: no request at all
    assert again.path == snap and len(hub.requests) == asked


def test_the_libraries_find_what_vitviz_downloaded(hub: StandinHub, tmp_path: Path) -> None:
    from huggingface_hub import try_to_load_from_cache

    load_checkpoint("org/tiny-vit")
    found = try_to_load_from_cache(
        "org/tiny-vit", "model.safetensors", cache_dir=tmp_path / "hf" / "hub"
    )
    assert isinstance(found, str) and Path(found).read_bytes()[:8] != b""
    assert Path(found).resolve().parent.name == "blobs"


def test_offline_never_touches_the_network_and_refuses_an_uncached_id(
    hub: StandinHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/tiny-vit", offline=True)
    _one_line(info, "org/tiny-vit", "--offline", "not in the Hugging Face cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/tiny-vit")
    _one_line(info, "org/tiny-vit", "HF_HUB_OFFLINE=1")
    assert hub.requests == []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    load_checkpoint("org/tiny-vit")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    asked = len(hub.requests)
    assert load_checkpoint("org/tiny-vit").model.config.num_classes == 3  # cached: offline opens
    assert len(hub.requests) == asked


def test_a_dropped_connection_resumes_with_a_range_request(
    hub: StandinHub, vit_files: dict[str, bytes]
) -> None:
    size = len(vit_files["model.safetensors"])
    hub.drop_after[("org/tiny-vit", "model.safetensors")] = size // 3
    load_checkpoint("org/tiny-vit")
    gets = [r for m, p, r in hub.requests if m == "GET" and p.endswith("/model.safetensors")]
    assert gets == ["", f"bytes={size // 3}-"]
    assert hub.served[("org/tiny-vit", "model.safetensors")] == size  # no byte sent twice


def test_a_cancelled_download_leaves_nothing_trusted_and_resumes(
    hub: StandinHub, tmp_path: Path, vit_files: dict[str, bytes]
) -> None:
    size = len(vit_files["model.safetensors"])
    plan = plan_download("org/tiny-vit", settings=hub_settings())
    assert plan.choice.total == sum(len(vit_files[n]) for n in NEEDED)  # known before
    seen: list[int] = []
    with pytest.raises(DownloadCancelledError):
        fetch(
            plan,
            progress=lambda done, total: seen.append(done),
            # at the first report inside the weights: a read holds at most 64 KiB of their
            # ~100 KB, so the cancel lands mid-file however the reads fall
            cancelled=lambda: bool(seen and seen[-1] > plan.choice.total - size),
        )
    repo = _repo_folder(tmp_path, "org/tiny-vit")
    partial = list((repo / "blobs").glob("*.incomplete"))
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < size
    assert not (repo / "refs" / "main").exists()
    assert not (repo / "snapshots" / COMMIT / "model.safetensors").exists()
    assert cached_target("org/tiny-vit") is None
    with pytest.raises(CheckpointError, match="not in the Hugging Face cache"):
        load_checkpoint("org/tiny-vit", offline=True)

    kept = partial[0].stat().st_size
    key = ("org/tiny-vit", "model.safetensors")
    for _ in range(200):  # the server counts a GET once it has written it: wait for that
        if key in hub.served:
            break
        time.sleep(0.01)
    sent = hub.served[key]
    load_checkpoint("org/tiny-vit")
    gets = [r for m, p, r in hub.requests if m == "GET" and p.endswith("/model.safetensors")]
    assert gets[-1] == f"bytes={kept}-"
    assert hub.served[("org/tiny-vit", "model.safetensors")] - sent == size - kept
    assert not list((repo / "blobs").glob("*.incomplete"))


def test_a_file_that_arrives_damaged_is_deleted_not_trusted(
    hub: StandinHub, tmp_path: Path
) -> None:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/damaged")
    _one_line(info, "org/damaged", "model.safetensors", "damaged")
    repo = _repo_folder(tmp_path, "org/damaged")
    assert not list((repo / "blobs").glob("*.incomplete"))
    assert not (repo / "snapshots" / COMMIT / "model.safetensors").exists()
    assert cached_target("org/damaged") is None


def test_a_missing_repository_is_one_line_and_writes_nothing(
    hub: StandinHub, tmp_path: Path
) -> None:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/no-such-model")
    _one_line(info, "org/no-such-model", "nor a model on", "HF_TOKEN")
    assert not _repo_folder(tmp_path, "org/no-such-model").exists()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/tiny-vit@v9")
    _one_line(info, "org/tiny-vit@v9", "no such revision")


def test_a_repository_with_only_bin_weights_is_read_with_weights_only(
    hub: StandinHub, tmp_path: Path
) -> None:
    loaded = load_checkpoint("org/bin-only")
    assert {p.name for p in loaded.path.iterdir()} == {"config.json", "pytorch_model.bin"}
    assert loaded.model.config.num_classes == 3


def test_a_repository_that_needs_its_own_code_is_refused_before_its_weights(
    hub: StandinHub,
) -> None:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/remote-code")
    _one_line(info, "org/remote-code", "trust_remote_code", "never runs")
    assert hub.files_served("org/remote-code") == {"config.json"}
    assert cached_target("org/remote-code") is None


def test_a_gated_repository_asks_for_a_token_and_opens_with_one(
    hub: StandinHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/gated-vit")
    _one_line(info, "org/gated-vit", "gated", "HF_TOKEN")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert load_checkpoint("org/gated-vit").model.config.num_classes == 3


def test_no_network_and_a_full_disk_are_one_line_each(
    hub: StandinHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    real = shutil.disk_usage
    monkeypatch.setattr(hub_fetch.shutil, "disk_usage", lambda _p: usage(10**6, 10**6, 1000))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/tiny-vit")
    _one_line(info, "org/tiny-vit", "free", "HF_HOME")
    assert hub.bytes_served() == 0
    monkeypatch.setattr(hub_fetch.shutil, "disk_usage", real)

    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", nowhere)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/tiny-vit")
    _one_line(info, "org/tiny-vit", "no connection", nowhere)


def test_the_cli_downloads_with_a_progress_line_and_offline_refuses(
    hub: StandinHub, capsys: pytest.CaptureFixture[str]
) -> None:
    from vitviz.cli import main

    assert main(["info", "org/bin-only", "--offline"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "org/bin-only" in err and "--offline" in err
    assert hub.requests == []
    assert main(["info", "org/tiny-vit"]) == 0
    err = capsys.readouterr().err
    assert "downloading org/tiny-vit (3 files," in err and "100%" in err


def test_which_files_are_chosen() -> None:
    def listing(*names: str) -> list[RepoFile]:
        return [RepoFile(n, 10, "e" * 64) for n in names]

    both = choose_files("a/b", listing("config.json", "model.safetensors", "pytorch_model.bin"))
    assert [f.name for f in both.files] == ["config.json", "model.safetensors"]
    shards = choose_files(
        "a/b",
        listing(
            "config.json",
            "model.safetensors.index.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "pytorch_model.bin.index.json",
            "pytorch_model-00001-of-00002.bin",
        ),
    )
    assert [f.name for f in shards.files][1:] == [
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    clip = choose_files(
        "a/clip",
        listing("config.json", "model.safetensors", "vocab.json", "merges.txt", "tokenizer.json"),
    )
    assert [f.name for f in clip.files] == ["config.json", "tokenizer.json", "model.safetensors"]
    openclip = choose_files(
        "laion/x", listing("open_clip_config.json", "open_clip_model.safetensors", "x.bin")
    )
    assert openclip.open_name == "open_clip_model.safetensors" and len(openclip.files) == 1
    with pytest.raises(CheckpointError, match="several weights files"):
        choose_files("a/b", listing("a.pth", "b.pth"))
    with pytest.raises(CheckpointError, match="no weights vitviz reads"):
        choose_files("a/b", listing("config.json", "flax_model.msgpack"))
    with pytest.raises(CheckpointError, match="trust_remote_code"):
        choose_files("a/b", listing("config.json", "model.safetensors"), tags=["custom_code"])


def test_the_curated_list_names_the_vits_people_study() -> None:
    from datetime import date

    from vitviz.checkpoints.hub_catalogue import curated_models
    from vitviz.core.model_ids import parse_model_ref

    as_of, models = curated_models()
    date.fromisoformat(as_of)
    labels = {m.label for m in models}
    for wanted in (
        "ViT-B/16 (AugReg)", "DeiT-S", "DeiT-B distilled", "DINO ViT-S/16", "DINO ViT-B/16",
        "DINOv2-S with registers", "BEiT-B", "EVA-02-Ti", "Swin-T", "PVT v2-b0",
        "CLIP ViT-B/32", "SigLIP-B/16",
    ):  # fmt: skip
        assert wanted in labels, wanted
    for m in models:
        assert parse_model_ref(m.repo_id) == (m.repo_id, "main"), m.repo_id
        assert m.size_mb > 0 and m.trained_on and m.licence


def test_a_blob_another_process_is_writing_is_waited_for_and_the_wait_can_be_cancelled(
    hub: StandinHub, tmp_path: Path
) -> None:
    """The lock huggingface_hub takes for a blob is vitviz's too: while it is held (timm or
    transformers downloading the same file) nothing is fetched, and Cancel still works."""
    import time

    from huggingface_hub.utils import WeakFileLock

    plan = plan_download("org/tiny-vit", settings=hub_settings())
    weights = plan.choice.files[-1]
    lock = tmp_path / "hf" / "hub" / ".locks" / "models--org--tiny-vit" / f"{weights.etag}.lock"
    lock.parent.mkdir(parents=True)
    start = time.monotonic()
    with WeakFileLock(lock), pytest.raises(DownloadCancelledError):
        fetch(plan, cancelled=lambda: time.monotonic() - start > 1.5)
    assert ("org/tiny-vit", weights.name) not in hub.served
    assert fetch(plan) == plan.snapshot  # once free, it downloads


def test_a_connection_that_keeps_breaking_is_one_line_and_the_next_try_resumes(
    hub: StandinHub, vit_files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    size = len(vit_files["model.safetensors"])
    monkeypatch.setattr(hub_fetch, "_RETRIES", 1)  # give up at the first break without progress
    hub.drop_after[("org/tiny-vit", "model.safetensors")] = 0
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/tiny-vit")
    _one_line(info, "org/tiny-vit", "connection", "broke", "resumes")
    assert cached_target("org/tiny-vit") is None
    hub.drop_after[("org/tiny-vit", "model.safetensors")] = [size // 2, 0]
    with pytest.raises(CheckpointError, match="broke"):
        load_checkpoint("org/tiny-vit")  # half of it came, then a break with nothing after
    load_checkpoint("org/tiny-vit")
    gets = [r for m, p, r in hub.requests if m == "GET" and p.endswith("/model.safetensors")]
    assert gets[-1] == f"bytes={size // 2}-"


# A listing's names that are no plain file name: on Windows "\\" and "C:" are a path (the first
# climbs out of the snapshot folder), NUL and control characters make no file name, Windows
# drops a trailing dot, ".." is the repository folder.
HOSTILE_NAMES = (
    "..\\..\\..\\..\\evil.safetensors",
    "C:evil.safetensors",
    "evil\x00.safetensors",
    "evil\n.safetensors",
    "evil.safetensors.",
    "..",
)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_listed_name_that_is_no_plain_file_name_is_never_chosen(name: str) -> None:
    with pytest.raises(CheckpointError, match="no weights vitviz reads"):
        choose_files("a/b", [RepoFile(name, 10, "e" * 64)])
    names = ("config.json", "model.safetensors.index.json", "model-1-of-2.safetensors")
    shards = choose_files(
        "a/b", [RepoFile(n, 10, "e" * 64) for n in (*names, "model-2-of-2.safetensors\n")]
    )
    assert [f.name for f in shards.files] == list(names)  # "$" let the newline by


def test_a_hostile_listing_is_one_line_and_writes_nothing(
    hub: StandinHub, tmp_path: Path, vit_files: dict[str, bytes]
) -> None:
    from vitviz.core.model_ids import parse_model_ref

    weights = vit_files["model.safetensors"]
    hub.repos["org/escape"] = StandinRepo("org/escape", {HOSTILE_NAMES[0]: weights}, COMMIT)
    hub.repos["org/bad-sha"] = StandinRepo("org/bad-sha", dict(vit_files), "a" * 40 + "\n")
    before = set(tmp_path.rglob("*"))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/escape")
    _one_line(info, "org/escape", "no weights vitviz reads")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/bad-sha")
    _one_line(info, "org/bad-sha", "without a commit hash")
    assert set(tmp_path.rglob("*")) == before and hub.bytes_served() == 0
    assert parse_model_ref("org/name\n") is None and parse_model_ref("org/name@main\n") is None


@pytest.mark.parametrize("ranges", [True, False])
def test_a_file_shorter_than_listed_is_one_line_deleted_and_not_asked_for_again(
    hub: StandinHub, tmp_path: Path, vit_files: dict[str, bytes], ranges: bool
) -> None:
    """A listing whose size lies (more than the server has): without ranges, each new GET
    started over and never reached the listed size, a loop only a cancel could end."""
    size = len(vit_files["model.safetensors"])
    lying = StandinRepo("org/short", dict(vit_files), COMMIT)
    lying.listed_sizes["model.safetensors"] = size + 100
    hub.repos["org/short"] = lying
    hub.ranges = ranges

    def gets() -> int:
        return sum(m == "GET" and p.endswith("/model.safetensors") for m, p, _ in hub.requests)

    plan = plan_download("org/short", settings=hub_settings())
    with pytest.raises(CheckpointError) as info:
        fetch(plan, cancelled=lambda: gets() > 5)
    _one_line(info, "org/short", "model.safetensors", "damaged", "deleted")
    assert gets() == 1
    repo = _repo_folder(tmp_path, "org/short")
    assert not list((repo / "blobs").glob("*.incomplete"))
    assert cached_target("org/short") is None


def _sharded(files: dict[str, bytes]) -> dict[str, bytes]:
    """``files`` with its model.safetensors as two shards and their index."""
    from hub_standin import _safetensors_bytes
    from safetensors.torch import load

    state = load(files["model.safetensors"])
    keys = sorted(state)
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    halves = (keys[: len(keys) // 2], keys[len(keys) // 2 :])
    out = {k: v for k, v in files.items() if k != "model.safetensors"}
    for name, part in zip(names, halves, strict=True):
        out[name] = _safetensors_bytes({k: state[k] for k in part})
    weight_map = {k: name for name, part in zip(names, halves, strict=True) for k in part}
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    out["model.safetensors.index.json"] = json.dumps(index).encode()
    return out


@pytest.mark.parametrize("repo_id", ["org/tiny-vit", "org/sharded"])
def test_links_that_stop_half_way_leave_nothing_the_next_open_trusts(
    hub: StandinHub,
    tmp_path: Path,
    vit_files: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
    repo_id: str,
) -> None:
    """Without symlinks (Windows without developer mode) the snapshot's files are copies of
    the blobs; a disk that fills while copying the weights must leave neither a half copy
    named model.safetensors nor a shards' index without all its shards (the next open would
    take either as the model)."""
    import errno
    import shutil

    hub.repos["org/sharded"] = StandinRepo("org/sharded", _sharded(vit_files), COMMIT)

    def no_symlinks(self: Path, target: str) -> None:
        raise OSError(errno.EPERM, "symlinks not allowed")

    real_copy = shutil.copyfile

    def disk_fills(src: Path, dst: Path) -> None:
        name = Path(dst).name  # the weights (the last shard): half, then a full disk
        if "-00002-of-" in name or ("model.safetensors" in name and "index" not in name):
            Path(dst).write_bytes(Path(src).read_bytes()[:1000])
            raise OSError(errno.ENOSPC, "No space left on device")
        real_copy(src, dst)

    monkeypatch.setattr(Path, "symlink_to", no_symlinks)
    monkeypatch.setattr(hub_fetch.shutil, "copyfile", disk_fills)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(repo_id)
    _one_line(info, repo_id, "disk", "full")
    snap = _repo_folder(tmp_path, repo_id) / "snapshots" / COMMIT
    assert not (snap / "model.safetensors").exists()
    assert not (snap / "model-00002-of-00002.safetensors").exists()
    assert cached_target(repo_id) is None
    monkeypatch.setattr(hub_fetch.shutil, "copyfile", real_copy)
    served = hub.bytes_served(repo_id)
    loaded = load_checkpoint(repo_id)  # the blobs stayed: only the copies are made now
    assert loaded.path == snap and hub.bytes_served(repo_id) == served
    assert not any(p.is_symlink() for p in snap.iterdir())
    assert loaded.model.config.num_classes == 3


def test_a_folder_or_a_cached_or_offline_id_opens_no_socket_and_writes_nothing(
    tmp_path: Path, vit_files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hub here (HF_ENDPOINT a closed port) and every connection refused and recorded:
    a folder of files, a cached id, an uncached id offline open (or are refused) without a
    socket, and none of them writes a file in the cache (no file a user gives writes one)."""
    import socket

    from vitviz.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{s.getsockname()[1]}")
    for name in ("HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    tried: list[object] = []

    def refuse(self: socket.socket, address: object) -> None:
        tried.append(address)
        raise ConnectionRefusedError("no sockets in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    folder = tmp_path / "plain"
    folder.mkdir()
    for name in NEEDED:
        (folder / name).write_bytes(vit_files[name])
    assert load_checkpoint(folder).model.config.num_classes == 3
    assert main(["info", str(folder)]) == 0
    with pytest.raises(CheckpointError, match="--offline"):
        load_checkpoint("org/tiny-vit", offline=True)
    assert main(["info", "org/tiny-vit", "--offline"]) == 2
    assert tried == [] and not (tmp_path / "hf").exists()

    snap = _repo_folder(tmp_path, "org/tiny-vit") / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for name in NEEDED:
        (snap / name).write_bytes(vit_files[name])
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text(COMMIT)
    cache = sorted((p, p.stat().st_mtime_ns) for p in (tmp_path / "hf").rglob("*"))
    assert load_checkpoint("org/tiny-vit").path == snap
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["info", "org/tiny-vit"]) == 0
    assert tried == []
    assert sorted((p, p.stat().st_mtime_ns) for p in (tmp_path / "hf").rglob("*")) == cache


@pytest.mark.parametrize("etag", ["abc", "../../x", "e" * 63, "g" * 64, "0" * 40 + "/"])
def test_a_listed_blob_id_that_is_no_hash_is_refused_before_a_byte(
    hub: StandinHub, tmp_path: Path, vit_files: dict[str, bytes], etag: str
) -> None:
    """A blob id names the blob's file and is the hash it is checked against: one that is
    neither a git blob id nor a sha256 (a short one left the file unchecked) is refused."""
    damaged = StandinRepo("org/odd", dict(vit_files), COMMIT, damaged={"model.safetensors"})
    damaged.listed_etags["model.safetensors"] = etag
    hub.repos["org/odd"] = damaged
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/odd")
    _one_line(info, "org/odd", "model.safetensors", "hash vitviz can check")
    assert hub.bytes_served() == 0
    assert not _repo_folder(tmp_path, "org/odd").exists()


def test_a_commit_asked_for_and_answered_with_another_is_refused(
    hub: StandinHub, tmp_path: Path, vit_files: dict[str, bytes]
) -> None:
    """org/name@<commit> is that commit or nothing: a hub answering with another commit's
    files would open a model the user did not ask for (and write a ref naming it)."""
    asked = "f" * 40
    hub.repos["org/any"] = StandinRepo("org/any", dict(vit_files), COMMIT, any_revision=True)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(f"org/any@{asked}")
    _one_line(info, f"org/any@{asked}", "answered with commit 1234567890ab", "not the one")
    assert hub.bytes_served() == 0 and not _repo_folder(tmp_path, "org/any").exists()
    assert load_checkpoint(f"org/tiny-vit@{COMMIT}").path.name == COMMIT  # the one asked for


def test_a_sign_in_page_in_place_of_the_hub_is_one_line(
    hub: StandinHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A network that answers every request with its sign-in page (200, HTML): the listing is
    no JSON, which was a JSONDecodeError traceback."""
    from vitviz.cli import main

    hub.portal = True
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("org/tiny-vit")
    _one_line(info, "org/tiny-vit", hub.url, "did not answer as a hub does", "sign-in page")
    assert main(["info", "org/tiny-vit"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sign-in page" in err
    assert not _repo_folder(tmp_path, "org/tiny-vit").exists()
