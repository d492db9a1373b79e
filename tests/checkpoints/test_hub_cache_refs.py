"""The Hugging Face cache's own layout opens with no network: a repository folder
(``models--org--name``, ``refs/main`` followed to its snapshot, files as symlinks into
``blobs/`` as the hub writes them) and a model id looked up in the cache; what can't be found or
is crafted is refused in one line naming the id and the cache."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from transformers import ViTConfig, ViTForImageClassification

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.hub_paths import looks_like_model_id, resolve_hub_reference

REVISION = "0123456789abcdef0123456789abcdef01234567"


def _hub_repo(cache: Path, repo_id: str, revision: str = REVISION) -> Path:
    """A tiny HF ViT saved as the hub cache stores it; returns the repository folder."""
    torch.manual_seed(0)
    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=3,
    )
    model = ViTForImageClassification(config)
    with torch.no_grad():
        model.classifier.weight.normal_()  # a head that can show a wrong logit
    staging = cache / "staging"
    model.save_pretrained(staging)
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / revision
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for f in sorted(staging.iterdir()):
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        f.rename(blob)
        (snap / f.name).symlink_to(Path("../../blobs") / blob.name)
    staging.rmdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return repo


def _logits(loaded) -> torch.Tensor:
    torch.manual_seed(1)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        return loaded.model(x)


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.chdir(tmp_path)  # a model id is not a relative path here
    return root


def test_repository_folder_opens_its_refs_main_snapshot(cache: Path) -> None:
    repo = _hub_repo(cache, "google/tiny-vit")
    via_repo = load_checkpoint(repo)
    via_snapshot = load_checkpoint(repo / "snapshots" / REVISION)
    assert via_repo.path == repo / "snapshots" / REVISION
    torch.testing.assert_close(_logits(via_repo), _logits(via_snapshot), rtol=0, atol=0)


def test_model_id_is_looked_up_in_the_cache(cache: Path) -> None:
    _hub_repo(cache, "google/tiny-vit")
    loaded = load_checkpoint("google/tiny-vit")
    assert loaded.path.parent.parent.name == "models--google--tiny-vit"
    assert loaded.model.config.num_classes == 3


def test_hf_home_is_used_when_hf_hub_cache_is_not_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    _hub_repo(tmp_path / "hf" / "hub", "facebook/tiny")
    assert resolve_hub_reference("facebook/tiny").name == REVISION


def test_a_missing_model_id_offline_names_the_id_and_the_cache(cache: Path) -> None:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("facebook/dinov2-small", offline=True)
    msg = str(info.value)
    assert "\n" not in msg
    assert "facebook/dinov2-small" in msg and str(cache) in msg and "--offline" in msg


def test_a_crafted_ref_cannot_leave_the_repository(cache: Path, tmp_path: Path) -> None:
    repo = _hub_repo(cache, "evil/ref")
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "refs" / "main").write_text("../../../outside")
    with pytest.raises(CheckpointError, match="names no snapshot folder"):
        load_checkpoint(repo)
    (repo / "refs" / "main").write_text("..")
    with pytest.raises(CheckpointError, match="names no snapshot folder"):
        load_checkpoint(repo)


def test_a_ref_to_a_snapshot_not_fetched_is_refused(cache: Path) -> None:
    repo = _hub_repo(cache, "org/gone")
    (repo / "refs" / "main").write_text("f" * 40)
    with pytest.raises(CheckpointError, match="not in the"):
        load_checkpoint(repo)


def test_without_refs_main_the_only_snapshot_is_taken_and_several_are_refused(
    cache: Path,
) -> None:
    repo = _hub_repo(cache, "org/one")
    (repo / "refs" / "main").unlink()
    assert load_checkpoint(repo).path.name == REVISION
    (repo / "snapshots" / ("a" * 40)).mkdir()
    with pytest.raises(CheckpointError, match="2 snapshots"):
        load_checkpoint(repo)


def test_what_is_a_model_id() -> None:
    assert looks_like_model_id("timm/vit_small_patch16_224.augreg_in21k_ft_in1k")
    assert looks_like_model_id("facebook/dinov2-small")
    for text in ("model.safetensors", "a/b/c", "../x", "/abs/path", "org/..", "", "ckpt/vit.pth"):
        assert not looks_like_model_id(text), text


def test_what_is_a_revision() -> None:
    from vitviz.core.model_ids import parse_model_ref

    for revision in ("main", "v1.0", "refs/pr/1", "a" * 40):
        assert parse_model_ref(f"org/name@{revision}") == ("org/name", revision)
    for revision in (".", "..", "a/./b", "a/../b", "a//b", "a/", "main\n", ""):
        assert parse_model_ref(f"org/name@{revision}") is None, revision


def _second_snapshot(repo: Path, name: str) -> Path:
    """A copy of the repository's snapshot under ``name``, its classifier made different."""
    from safetensors.torch import load_file, save_file

    first = repo / "snapshots" / REVISION
    snap = repo / "snapshots" / name
    snap.mkdir()
    for f in first.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    state = load_file(snap / "model.safetensors")
    state["classifier.bias"] = state["classifier.bias"] + 1.0
    save_file(state, snap / "model.safetensors", metadata={"format": "pt"})
    return snap


def test_a_ref_that_is_not_a_hash_opens_the_same_snapshot_in_the_window_and_the_cli(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mirror's or a hand-made cache's refs/main names its snapshot by its own name: the
    window's list, load_checkpoint and the CLI all open that one (as huggingface_hub does
    offline), not the other snapshot beside it."""
    from vitviz.checkpoints import list_cached_checkpoints
    from vitviz.cli import main

    repo = _hub_repo(cache, "mirror/tiny-vit")
    mirrored = _second_snapshot(repo, "v1.0-mirror")
    (repo / "refs" / "main").write_text("v1.0-mirror\n")
    entries = [e for e in list_cached_checkpoints() if e.source == "huggingface"]
    assert [e.path for e in entries] == [mirrored]
    assert load_checkpoint("mirror/tiny-vit").path == mirrored
    assert main(["info", "mirror/tiny-vit", "--json"]) == 0
    assert f'"path": "{mirrored}"' in capsys.readouterr().out
    loaded = load_checkpoint("mirror/tiny-vit@" + REVISION)  # a commit hash names its own
    assert loaded.path == repo / "snapshots" / REVISION
