"""The twelve timm architectures that used to open with wrong numbers are now exact or
refused by name, as timm's folder (config.json + model.safetensors) and as a bare state dict.

"Exact" is measured against timm's own eager forward on weights perturbed with seeded noise of
their own scale (``randomize_``): logits within 1e-4 (relative), attention within 1e-5. A
checkpoint that opens is never allowed to differ: the one outcome that always fails is
opened-and-wrong. The folder form keeps timm's architecture name and widths with ``depth=1``
in its ``model_args`` (as timm's ``save_for_hf`` records them), so each case stays fast; the
bare form has every block, since the block count is part of what identifies an architecture.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf
from zoo_helpers import ATTN_ATOL, images, max_diff, randomize_, timm_reference

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.library_check import Reference, checked
from vitviz.kinds.vit.families import timm_arch

EXACT = "exact"
# a bare state dict of a plain timm name: asked for its activation (a fine-tune may have another),
# and exact once it is given
ASKS = (
    r"the weights don't say: (heads, )?activation\b.*"
    r"--arch {name} \(the timm name its tensors fit\)"
)
# a bare rotary ViT without a position table: its trained image size is not in the file
ASKS_SIZE = r"rotary ViT; the weights don't say: image_size\b"
ROTARY = "rotary position embedding"
AMBIGUOUS = r"compute differently .* --arch NAME"
# (architecture, verdict of the folder, verdict of the bare state dict): EXACT or a refusal regex.
TWELVE = [
    ("vit_base_patch16_rpn_224", EXACT, ASKS),  # residual post-norm blocks, in timm's layout
    ("vit_base_patch16_gap_224", EXACT, AMBIGUOUS),  # 16 heads of 48, or SigLIP's 12 of 64
    ("vit_small_patch16_rope_ape_224", EXACT, EXACT),  # timm-eva
    ("vit_pe_spatial_tiny_patch16_512", EXACT, EXACT),  # timm-eva (no MAP head)
    ("vit_base_patch16_clip_quickgelu_224", EXACT, AMBIGUOUS),  # QuickGELU or GELU
    ("vit_base_patch16_clip_224", EXACT, AMBIGUOUS),
    ("vit_base_patch32_clip_224", EXACT, AMBIGUOUS),
    ("vit_medium_patch16_clip_224", EXACT, ASKS),
    ("vit_betwixt_patch32_clip_224", EXACT, ASKS),
    ("vit_small_patch16_rope_224", EXACT, ASKS_SIZE),  # timm-eva
    ("vit_mediumd_patch16_rope_reg1_gap_256", EXACT, ASKS_SIZE),  # timm-eva
    ("vit_small_patch16_dinov3", EXACT, ASKS_SIZE),  # timm-eva
]
# The block parts of timm's own ViT (DESIGN §4: a vocabulary of block parts), each named.
BLOCK_PARTS = [
    ("vit_pwee_patch16_reg1_gap_256", EXACT, ASKS),  # parallel attention/MLP blocks
    ("vit_base_patch16_xp_224", EXACT, ASKS),  # RMSNorm, parallel blocks, qk-norm
    ("beit3_base_patch16_224", EXACT, ASKS),  # norms inside the attention and the MLP
    ("vit_small_patch16_18x2_224", EXACT, ASKS),  # blocks of several parallel branches
    ("vit_dwee_patch16_reg1_gap_256", "differential attention", "differential attention"),
]
ALL = TWELVE + BLOCK_PARTS
# Folders the issue saw refused with "the weights don't say: heads" although config.json names them.
NAMED_FOLDERS = [
    "vit_xsmall_patch16_clip_224",
    "vit_little_patch16_reg4_gap_256",
    "vit_base_patch16_plus_240",
]
LOGITS_RTOL = 1e-4


def _patch(name: str) -> int:
    return int(re.search(r"patch(\d+)", name).group(1))


def _model(name: str, seed: int, **overrides) -> torch.nn.Module:
    """timm's ``name`` at 2×2 patches, 5 classes, every parameter randomised (seeded)."""
    side = 2 * _patch(name)
    torch.manual_seed(seed)
    model = timm.create_model(name, pretrained=False, img_size=side, num_classes=5, **overrides)
    return randomize_(model, seed=seed, noise_dtype=torch.float32)


def _bare_shapes_only(name: str, path: Path) -> None:
    """A bare state dict with timm's exact keys and shapes (zeros): enough for a refusal, which
    reads no values; a wrongly opened one still fails (its verdict is not the refusal)."""
    side = 2 * _patch(name)
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False, img_size=side, num_classes=5)
    zero = torch.zeros(1)  # one stored number, viewed at every shape: a small file
    state = {k: zero.expand(v.shape) for k, v in model.state_dict().items()}
    torch.save(state, path)


def verdict(
    path: Path,
    model: torch.nn.Module | None,
    settings: dict | None = None,
    notes: list[str] | None = None,
) -> tuple[str, str]:
    """("refused", message) or ("exact", numbers); opened-and-wrong fails here. ``notes``, when
    given, receives the opened checkpoint's notes (no second load to read them)."""
    try:
        loaded = load_checkpoint(path, settings)
    except CheckpointError as exc:
        return "refused", str(exc)
    if notes is not None:
        notes.extend(loaded.notes)
    assert model is not None, f"{path.name} opened, but a refusal was expected: {loaded.notes}"
    size = getattr(getattr(model, "patch_embed", None), "img_size", None)  # timm's built size
    x = images(1, *(size or loaded.config.image_size), seed=3)  # (a rotary ViT's may differ)
    ref_logits, ref_attn = timm_reference(model, x)
    with torch.no_grad():
        logits = loaded.model(x)  # the fused path
        explained = loaded.model.forward_explained(x, capture_attention=True)
    attn = explained.attentions
    scale = float(ref_logits.abs().max())
    rel = max(max_diff(out, ref_logits) for out in (logits, explained.logits)) / scale
    assert len(attn) == len(ref_attn), "a different number of attention layers"
    att = max(max_diff(a, b) for a, b in zip(attn, ref_attn, strict=True))
    assert rel <= LOGITS_RTOL and att <= ATTN_ATOL, (
        f"OPEN-AND-WRONG {path.name}: logits {rel:.2g}, attention {att:.2g}"
    )
    return "exact", f"logits {rel:.1g}, attention {att:.1g}"


def _assert_verdict(got: tuple[str, str], expected: str) -> None:
    kind, text = got
    if expected == EXACT:
        assert kind == "exact", f"expected exact, got refused: {text}"
    else:
        assert kind == "refused", f"expected a refusal naming {expected!r}, got {text}"
        assert re.search(expected, text), text
        assert "\n" not in text


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VITVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VITVIZ_NO_LIBRARY_CHECK", raising=False)


@pytest.mark.parametrize(("name", "folder_verdict", "_bare"), ALL, ids=[t[0] for t in ALL])
def test_timm_folder_is_exact_or_refused_by_name(
    tmp_path: Path, name: str, folder_verdict: str, _bare: str
) -> None:
    model = _model(name, seed=len(name), depth=1)
    save_for_hf(model, tmp_path / name, safe_serialization=True)
    notes: list[str] = []
    got = verdict(tmp_path / name, model if folder_verdict == EXACT else None, notes=notes)
    _assert_verdict(got, folder_verdict)
    if got[0] == "exact":
        assert any(n.startswith(f"checked against timm {timm.__version__}") for n in notes)


@pytest.mark.parametrize(("name", "_folder", "bare_verdict"), ALL, ids=[t[0] for t in ALL])
def test_bare_timm_state_dict_is_exact_or_refused(
    tmp_path: Path, name: str, _folder: str, bare_verdict: str
) -> None:
    path = tmp_path / f"{name}.pth"
    model = None
    if bare_verdict in (EXACT, ASKS, ASKS_SIZE):
        model = _model(name, seed=len(name))
        torch.save(model.state_dict(), path)
    else:
        _bare_shapes_only(name, path)
    notes: list[str] = []  # those of the last verdict's load (settings None, or the answer)
    got = verdict(path, model if bare_verdict == EXACT else None, notes=notes)
    _assert_verdict(got, bare_verdict.format(name=name) if bare_verdict == ASKS else bare_verdict)
    answer = None
    if bare_verdict == ASKS:  # the answer the message asks for opens it exactly
        settings = timm_arch.from_timm(name, {}).settings
        answer = {"activation": settings["activation"]}
        if "say: heads" in got[1]:  # a head count no convention gives (heads of 64 wide)
            answer["heads"] = settings["heads"]
    if bare_verdict == ASKS_SIZE:
        answer = {"image_size": list(model.patch_embed.img_size)}
    if answer is not None:
        notes.clear()
        got = verdict(path, model, answer, notes=notes)
        assert got[0] == "exact", got
    if got[0] == "exact":
        assert any(n.startswith(f"recognised as timm's {name}") for n in notes), notes


@pytest.mark.parametrize("name", NAMED_FOLDERS)
def test_named_folders_open_with_timms_heads(tmp_path: Path, name: str) -> None:
    model = _model(name, seed=7, depth=1)
    save_for_hf(model, tmp_path / name, safe_serialization=True)
    _assert_verdict(verdict(tmp_path / name, model), EXACT)
    assert load_checkpoint(tmp_path / name).config.heads == model.blocks[0].attn.num_heads


def test_arch_setting_opens_an_ambiguous_bare_state_dict(tmp_path: Path) -> None:
    """Bare CLIP weights are GELU or QuickGELU; ``arch`` (--arch) says which. (Its exactness is
    the folder test's: the same name, the same reading.)"""
    name = "vit_base_patch32_clip_quickgelu_224"
    path = tmp_path / "clip.pth"
    _bare_shapes_only(name, path)
    with pytest.raises(CheckpointError, match=AMBIGUOUS):
        load_checkpoint(path)
    loaded = load_checkpoint(path, config={"arch": name})
    assert (loaded.config.activation, loaded.config.norm_eps) == ("quick_gelu", 1e-5)
    assert any(n.startswith(f"assumed from timm's {name} (the arch given)") for n in loaded.notes)
    with pytest.raises(CheckpointError, match=r"install timm|can't build vit_nonexistent"):
        load_checkpoint(path, config={"arch": "vit_nonexistent_patch32"})


def test_library_check_refuses_a_model_that_differs_and_caches_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "vit_xsmall_patch16_clip_224"
    model = _model(name, seed=9, depth=1)
    save_for_hf(model, tmp_path / "f", safe_serialization=True)
    with pytest.raises(CheckpointError, match=r"differs from timm .*logits .*attention"):
        load_checkpoint(tmp_path / "f", config={"norm_eps": 1e-3})
    loaded = load_checkpoint(tmp_path / "f")
    assert isinstance(loaded.reference, Reference) and loaded.reference.arch == name

    def no_second_check(*_args, **_kwargs):
        raise AssertionError("the cached result was not used")

    monkeypatch.setattr("vitviz.checkpoints.library_check.compare", no_second_check)
    again = load_checkpoint(tmp_path / "f")
    assert [n for n in again.notes if "checked" in n] == [n for n in loaded.notes if "checked" in n]
    result = checked(loaded.model, tmp_path / "f", loaded.reference, kind=loaded.kind)
    assert result is not None and result.ok


def test_table_without_timm_gives_timms_own_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in table (made from timm) agrees with timm's definition, and refuses what it
    doesn't know with 'install timm'."""
    assert timm_arch.table()["timm_version"] == timm.__version__, "run make_timm_table.py"
    monkeypatch.setattr(timm_arch, "timm_version", lambda: None)
    for name, *_ in TWELVE:
        live = timm_arch.from_timm(name, {})
        stored, where = timm_arch.record_for(name, {})
        assert "table" in where
        assert (stored.settings, stored.refusal, stored.signature) == (
            live.settings,
            live.refusal,
            live.signature,
        )
    with pytest.raises(timm_arch.ArchError, match="install timm to open vit_made_up") as caught:
        timm_arch.record_for("vit_made_up_patch16_224", {})
    assert "install.sh --families" in str(caught.value)  # the one way to get the libraries
    with pytest.raises(timm_arch.ArchError, match="model_args num_heads"):
        timm_arch.record_for("vit_base_patch16_224", {"num_heads": 4})


def test_cli_verify_prints_the_table_and_info_names_the_architecture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vitviz.cli import main

    name = "vit_tiny_patch16_224"
    model = _model(name, seed=10)
    save_for_hf(model, tmp_path / "tiny", safe_serialization=True)
    torch.save(model.state_dict(), tmp_path / "tiny.pth")
    assert main(["verify", str(tmp_path / "tiny.pth")]) == 2  # the bare file's activation
    assert "the weights don't say: activation" in capsys.readouterr().out
    act = ["--config", str(tmp_path / "act.json")]
    (tmp_path / "act.json").write_text('{"activation": "gelu"}')
    assert main(["verify", str(tmp_path / "tiny"), str(tmp_path / "tiny.pth"), *act]) == 0
    out, err = capsys.readouterr()
    rows = [line for line in out.splitlines() if line.startswith("tiny")]
    assert len(rows) == 2 and all(f"timm {timm.__version__}" in r for r in rows), out
    assert rows[0].rstrip().endswith("exact"), out  # the folder: nothing assumed
    assert rows[1].rstrip().endswith("assumptions"), out  # the bare file: listed before
    assert "vitviz-cli: tiny.pth: assumed heads 3" in err, err  # the lines before the table
    assert main(["info", str(tmp_path / "tiny.pth"), *act]) == 0
    out = capsys.readouterr().out
    assert f"recognised as timm's {name}" in out and "checked against timm" in out
    assert main(["info", str(tmp_path / "tiny.pth"), "--heads", "4", *act]) == 0
    out = capsys.readouterr().out  # heads 4 fits no timm name: the common ViT, said so
    assert "assumed timm's common ViT" in out and "4 heads of 48" in out
    (tmp_path / "eps.json").write_text('{"norm_eps": 0.01}')
    assert main(["verify", str(tmp_path / "tiny"), "--config", str(tmp_path / "eps.json")]) == 2
    assert "refused" in capsys.readouterr().out


def test_transformers_folder_is_checked_by_transformers(tmp_path: Path) -> None:
    import transformers as tr

    config = tr.ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=96,
        num_labels=4,
        layer_norm_eps=1e-6,
    )
    torch.manual_seed(11)
    model = randomize_(tr.ViTForImageClassification(config), seed=11)
    model.save_pretrained(tmp_path / "hf", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "hf")
    note = next(n for n in loaded.notes if n.startswith("checked against transformers"))
    assert "ViTForImageClassification" in note
    with pytest.raises(CheckpointError, match=r"differs from transformers .*logits"):
        load_checkpoint(tmp_path / "hf", config={"norm_eps": 1e-2})


def test_transformers_fields_not_read_are_listed_without_transformers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import transformers as tr

    config = tr.ViTConfig(
        image_size=32, patch_size=8, hidden_size=48, num_hidden_layers=1, num_attention_heads=3
    )
    tr.ViTModel(config).save_pretrained(tmp_path / "hf", safe_serialization=True)
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["fancy_new_attention"] = True  # a field this vitviz has never heard of
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setattr("vitviz.kinds.vit.families.huggingface.library_version", lambda _name: None)
    notes = load_checkpoint(tmp_path / "hf").notes
    assert any("did not read" in n and "fancy_new_attention" in n for n in notes), notes
    assert not any("did not read" in n and "transformers_version" in n for n in notes)


def test_library_check_can_be_switched_off_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model("vit_xsmall_patch16_clip_224", seed=12, depth=1)
    save_for_hf(model, tmp_path / "f", safe_serialization=True)
    monkeypatch.setenv("VITVIZ_NO_LIBRARY_CHECK", "1")
    loaded = load_checkpoint(tmp_path / "f", config={"norm_eps": 1e-3})  # not caught: off
    assert "not checked against timm (VITVIZ_NO_LIBRARY_CHECK=1)" in loaded.notes


def test_arch_is_refused_where_no_timm_converter_reads_it(tmp_path: Path) -> None:
    from zoo_helpers import tiny_torchvision_vit

    path = tmp_path / "tv.pth"
    torch.save(tiny_torchvision_vit().state_dict(), path)
    with pytest.raises(CheckpointError, match="unknown settings arch"):
        load_checkpoint(path, config={"heads": 2, "arch": "vit_base_patch16_224"})
