"""The model files of trained tutorial ViTs, opened from their own code: one-channel models
(Conv2d and unfold + Linear patches), post-norm without CLS, training checkpoints, tuple / dict
/ probability outputs, config-object constructors. Each opens with the logits of the file's own
forward pass and the attention of its attention modules computed by hand."""

from __future__ import annotations

import json
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
import torchvision.transforms as T
from PIL import Image
from test_modelcode_layouts import (
    fused_by_hand,
    import_file,
    multihead_by_hand,
    scramble,
    separate_by_hand,
)
from torch import Tensor, nn
from tutorial_families import (
    CONFIG_OBJECT,
    FACTORY,
    FAMILIES,
    FIXED_BATCH,
    MNIST_CONV,
    REARRANGE_LINEAR,
    Family,
)

from vitviz.checkpoints import LoadedModel
from vitviz.cli import main
from vitviz.kinds.vit.analysis import Analysis
from vitviz.modelcode import ModelCodeError, load_model_code, make_spec
from vitviz.pipeline.analysis import analyze

BY_HAND = {"Attention": fused_by_hand, "MHSA": separate_by_hand}
BY_HAND["MultiheadAttention"] = multihead_by_hand


def write_source(folder: Path, source: str, name: str = "model.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


def build(path: Path, name: str, args: dict, seed: int = 0) -> nn.Module:
    """The model built the plain way (independent of vitviz), weights scrambled, eval mode."""
    module = import_file(path)
    torch.manual_seed(seed)
    model = getattr(module, name)(**args)
    scramble(model, seed)
    with torch.no_grad():  # sharper attention where the scores are not scaled up elsewhere
        for name, p in model.named_parameters():
            if name.endswith(("query.weight", "key.weight")):
                p.mul_(3.0)
    return model.eval()


def own_forward(model: nn.Module, x: Tensor) -> Tensor:
    """The file's forward pass, the class-width tensor picked out as the test knows it is."""
    with torch.no_grad():
        out = model(x)
    if isinstance(out, tuple):
        return out[1]
    if isinstance(out, dict):
        return out["out"]
    return out


def attention_by_hand(model: nn.Module, attention_class: str, x: Tensor) -> list[Tensor]:
    """Each attention module's attention from its input in a plain forward: L × (B, H, N, N)."""
    inputs: list[tuple[nn.Module, tuple]] = []
    handles = [
        m.register_forward_pre_hook(lambda mod, args: inputs.append((mod, args)))
        for m in model.modules()
        if type(m).__name__ == attention_class
    ]
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad():
            model(x)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        for h in handles:
            h.remove()
    with torch.no_grad():
        return [BY_HAND[attention_class](mod, args) for mod, args in inputs]


def assert_opens_exactly(
    model: nn.Module, loaded: LoadedModel, attention_class: str, image: Path
) -> Analysis:
    """Logits (or probabilities) of the file's own forward at 1e-5 and attention by hand."""
    a = analyze(loaded, image)
    x = a.input[None]
    given = own_forward(model, x)
    outputs = getattr(loaded.model.config, "outputs", "logits")
    if outputs == "probabilities":  # shown as given; the log is what gradients target
        torch.testing.assert_close(a.probs, given[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(a.logits.exp(), given[0], atol=1e-5, rtol=0)
    else:
        torch.testing.assert_close(a.logits, given[0], atol=1e-5, rtol=1e-5)
    hand = attention_by_hand(model, attention_class, x)
    assert a.attention.shape[0] == len(hand)
    for got, want in zip(a.attention, hand, strict=True):
        torch.testing.assert_close(got, want[0], atol=1e-6, rtol=5e-4)
    assert max(float(h.max()) for h in hand) > 0.5  # peaked: a wrong capture can't pass
    return a


@pytest.fixture(scope="module")
def photo(photo_files) -> Path:
    return photo_files["chelsea"]


@pytest.mark.parametrize("family", FAMILIES, ids=[f.key for f in FAMILIES])
def test_family_opens_from_its_own_code(family: Family, tmp_path: Path, photo: Path):
    path = write_source(tmp_path, family.source)
    model = build(path, family.name, family.args)
    weights = tmp_path / "weights.pth"
    torch.save(model.state_dict(), weights)
    loaded = load_model_code(make_spec(path, family.name, family.args, weights, family.settings))
    cfg = loaded.model.config
    grid = family.image_size // family.patch
    assert (cfg.depth, cfg.heads, cfg.num_prefix_tokens, cfg.num_classes) == (
        family.depth,
        family.heads,
        family.prefix,
        family.num_classes,
    )
    assert (cfg.patch_size, cfg.image_size, cfg.in_channels) == (
        family.patch,
        (family.image_size, family.image_size),
        family.channels,
    )
    assert loaded.preprocessing.channels == family.channels
    a = assert_opens_exactly(model, loaded, family.attention_class, photo)
    assert a.input.shape == (family.channels, family.image_size, family.image_size)
    assert a.grid == (grid, grid)
    for m in (a.rollout(), a.gradient_rollout(), a.relevance()):
        assert m.shape == (grid, grid) and torch.isfinite(m).all()


def test_one_channel_input_is_the_grayscale_of_the_photo(tmp_path: Path, photo: Path):
    """The one-channel model sees the photo's luma, resized and centre-cropped to 28, and
    normalised with the mean and std given in one number each."""
    path = write_source(tmp_path, MNIST_CONV)
    model = build(path, "MnistViT", {})
    torch.save(model.state_dict(), tmp_path / "w.pth")
    settings = {"mean": 0.2860, "std": 0.3530}  # Fashion-MNIST's
    loaded = load_model_code(make_spec(path, "MnistViT", {}, tmp_path / "w.pth", settings))
    a = analyze(loaded, photo)
    hand = T.Compose(
        [
            T.Grayscale(1),
            T.Resize(28, interpolation=T.InterpolationMode.BICUBIC),
            T.CenterCrop(28),
            T.ToTensor(),
            T.Normalize((0.2860,), (0.3530,)),
        ]
    )(Image.open(photo).convert("RGB"))
    torch.testing.assert_close(a.input, hand, atol=1e-6, rtol=0)
    assert any("1-channel inputs (from the patch Conv2d)" in n for n in loaded.notes)


def test_one_channel_from_the_argument_and_the_first_linear(tmp_path: Path):
    """in_channels=1 as an argument with a Linear patch embedding, and the patch Linear's
    width alone (p² inputs) when no argument names the channels."""
    unfold = next(f for f in FAMILIES if f.key == "mnist_unfold")
    path = write_source(tmp_path, unfold.source)
    loaded = load_model_code(make_spec(path, "UnfoldViT", {}))
    assert loaded.model.config.in_channels == 1
    assert any("the argument n_channels" in n for n in loaded.notes)
    renamed = unfold.source.replace("n_channels", "chans")  # no known argument name
    path = write_source(tmp_path / "renamed", renamed)
    loaded = load_model_code(make_spec(path, "UnfoldViT", {}))
    assert (loaded.model.config.in_channels, loaded.model.config.patch_size) == (1, 4)
    assert any("the first Linear layer (16 inputs)" in n for n in loaded.notes)


# -- training checkpoints ----------------------------------------------------------------------


FASHION = ["T-shirt", "Trouser", "Pullover", "Dress", "Coat"]
FASHION += ["Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def training_checkpoint(model: nn.Module, **beside) -> dict:
    """What a training script saves: weights, optimizer state, epoch, config, and ``beside``."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 1, 28, 28)).sum().backward()
    opt.step()
    opt.zero_grad()
    return {
        "epoch": 12,
        "optimizer_state": opt.state_dict(),
        "config": {"dim": 32, "depth": 2, "lr": 1e-3},
        "arch": "vit",
        **beside,
    }


def test_a_training_checkpoint_opens_with_its_classes(tmp_path: Path, photo: Path):
    path = write_source(tmp_path, MNIST_CONV)
    model = build(path, "MnistViT", {})
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ckpt = training_checkpoint(model, model_state=state, classes=FASHION, img_size=28)
    torch.save(ckpt, tmp_path / "best.pth")
    loaded = load_model_code(make_spec(path, "MnistViT", {}, tmp_path / "best.pth"))
    assert loaded.class_names == FASHION
    assert "weights from the key 'model_state' of the checkpoint" in loaded.notes
    assert "10 class names from the checkpoint's 'classes'" in loaded.notes
    assert "image size 28×28 from the checkpoint's 'img_size'" in loaded.notes
    assert "image size 28 given in the checkpoint" in loaded.notes
    model.load_state_dict(state)
    assert_opens_exactly(model, loaded, "Attention", photo)


def test_weights_are_found_by_the_models_names_whatever_the_key(tmp_path: Path):
    """Nested under any key, with a 'module.' prefix, beside an EMA copy that also fits, with
    class_to_idx for names; a dict whose tensors are not the model's is refused by name."""
    path = write_source(tmp_path, MNIST_CONV)
    model = build(path, "MnistViT", {})
    state = model.state_dict()
    ema = {k: v + 1 for k, v in state.items()}
    wrapped = {f"module.{k}": v for k, v in state.items()}
    ckpt = {  # the EMA copy comes first and fits too: it is still not the one taken
        "run": {
            "ema": ema,
            "weights": wrapped,
            "class_to_idx": {n: i for i, n in enumerate(FASHION)},
        },
        "step": 5,
    }
    torch.save(ckpt, tmp_path / "nested.pth")
    loaded = load_model_code(make_spec(path, "MnistViT", {}, tmp_path / "nested.pth"))
    inner = loaded.model.inner
    for k, v in state.items():
        torch.testing.assert_close(inner.state_dict()[k], v, atol=0, rtol=0)  # not the EMA
    assert loaded.class_names == FASHION
    assert "weights from the key 'run'/'weights' of the checkpoint" in loaded.notes
    assert "the key 'run'/'ema' also fits the model: not used" in loaded.notes
    assert "state dict keys had the prefix 'module.'; it was removed" in loaded.notes
    torch.save({"optimizer": {"state": {0: {"exp_avg": torch.zeros(3)}}}}, tmp_path / "opt.pth")
    with pytest.raises(ModelCodeError) as info:
        load_model_code(make_spec(path, "MnistViT", {}, tmp_path / "opt.pth"))
    assert str(info.value) == (
        "opt.pth holds a dict with 1 dict(s) of tensors, none with the parameter names of "
        "MnistViT (its keys: 'optimizer'); give the file that torch.save(model.state_dict(), "
        "...) wrote for this model"
    )


def saved_on(path: Path, device: str) -> None:
    """Rewrite a torch.save zip file as if its tensors had been saved on ``device`` (the
    location string each storage carries): what a checkpoint trained on a GPU or a Mac holds."""
    with zipfile.ZipFile(path) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    pkl = next(n for n in entries if n.endswith("data.pkl"))
    where = device.encode()
    entries[pkl] = entries[pkl].replace(
        b"X\x03\x00\x00\x00cpu", b"X" + len(where).to_bytes(4, "little") + where
    )
    assert b"X" + len(where).to_bytes(4, "little") + where in entries[pkl]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries.items():
            z.writestr(name, data)


@pytest.mark.parametrize("device", ["cuda:0", "mps"])
def test_a_checkpoint_saved_on_a_gpu_opens_on_the_cpu(device: str, tmp_path: Path, photo: Path):
    path = write_source(tmp_path, MNIST_CONV)
    model = build(path, "MnistViT", {})
    torch.save(training_checkpoint(model, model_state=model.state_dict()), tmp_path / "gpu.pth")
    saved_on(tmp_path / "gpu.pth", device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):  # the file really says CUDA
            torch.load(tmp_path / "gpu.pth", weights_only=True)
    loaded = load_model_code(make_spec(path, "MnistViT", {}, tmp_path / "gpu.pth"))
    assert next(loaded.model.parameters()).device.type == "cpu"
    assert_opens_exactly(model, loaded, "Attention", photo)


def test_a_checkpoint_that_needs_code_is_refused_and_nothing_runs(tmp_path: Path):
    """A checkpoint pickling an object the reader doesn't admit (a Fraction; an argparse
    Namespace, timm's train.py's, is the one class admitted) is refused by the weights_only
    reader; the object's class is named, not imported or called."""
    from fractions import Fraction

    path = write_source(tmp_path, MNIST_CONV)
    model = build(path, "MnistViT", {})
    torch.save({"model": model.state_dict(), "lr": Fraction(1, 3)}, tmp_path / "a.pth")
    with pytest.raises(ModelCodeError, match=r"fractions\.Fraction"):
        load_model_code(make_spec(path, "MnistViT", {}, tmp_path / "a.pth"))


# -- a config-object constructor opened through a two-line factory --------------------------


def test_a_config_object_constructor_opens_through_a_factory(tmp_path: Path, photo: Path):
    path = write_source(tmp_path, CONFIG_OBJECT)
    factory = write_source(tmp_path, FACTORY, "factory.py")
    module = import_file(path)
    torch.manual_seed(0)
    model = module.ConfigViT(module.ViTConfig(depth=3))
    scramble(model, 0)
    model.eval()
    torch.save(model.state_dict(), tmp_path / "w.pth")
    loaded = load_model_code(make_spec(factory, "make_vit", {"depth": 3}, tmp_path / "w.pth"))
    assert (loaded.model.config.depth, loaded.model.config.image_size) == (3, (32, 32))
    assert_opens_exactly(model, loaded, "Attention", photo)


def test_cli_explain_opens_a_one_channel_training_checkpoint(tmp_path: Path, photo: Path, capsys):
    path = write_source(tmp_path, MNIST_CONV)
    model = build(path, "MnistViT", {})
    ckpt = training_checkpoint(model, model_state_dict=model.state_dict(), classes=FASHION)
    torch.save(ckpt, tmp_path / "ckpt.pt")
    argv = ["explain", str(photo), "--model-code", f"{path}:MnistViT", "--model-args", "{}"]
    argv += ["--checkpoint", str(tmp_path / "ckpt.pt"), "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    capsys.readouterr()
    argv = ["info", str(tmp_path / "ckpt.pt"), "--model-code", f"{path}:MnistViT", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["class_names"] == FASHION
    assert d["config"]["in_channels"] == 1 and d["preprocessing"]["channels"] == 1


# -- outputs as written ------------------------------------------------------------------------


RETURNS_FAMILY = next(f for f in FAMILIES if f.key == "tuple_output")


@pytest.mark.parametrize(
    ("output", "kind", "note"),
    [
        ("tuple", "logits", "the class scores are element 1 of the returned tuple; left out: "
         "element 0 of the returned tuple (1×17×32)"),
        ("dict", "logits", "the class scores are the returned dict's 'out'; left out: the "
         "returned dict's 'features' (1×17×32)"),
        ("pooled", "logits", "the class scores are element 1 of the returned tuple; left out: "
         "element 0 of the returned tuple (1×32)"),
        ("softmax", "probabilities", "the model returns probabilities (rows sum to 1): they "
         "are shown as given; gradient methods target their log"),
        ("log_softmax", "log-probabilities", "the model returns log-probabilities "
         "(log-softmax): the probabilities shown are their exp; gradient methods target them"),
        ("logits", "logits", None),
    ],
)  # fmt: skip
def test_the_output_is_read_as_written_and_said(output, kind, note, tmp_path: Path):
    path = write_source(tmp_path, RETURNS_FAMILY.source)
    model = build(path, "TupleViT", {"output": output})
    torch.save(model.state_dict(), tmp_path / "w.pth")
    loaded = load_model_code(make_spec(path, "TupleViT", {"output": output}, tmp_path / "w.pth"))
    assert loaded.model.config.outputs == kind
    said = [n for n in loaded.notes if n.startswith(("the class scores", "the model returns"))]
    assert said == ([note] if note else [])
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    logits = build(path, "TupleViT", {"output": "logits"})(x).detach()  # same seed, same weights
    got = loaded.model(x)  # what vitviz's maps and gradients use
    want = logits.log_softmax(-1) if kind != "logits" else logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_two_outputs_of_class_width_are_refused_not_guessed(tmp_path: Path):
    path = write_source(tmp_path, RETURNS_FAMILY.source)
    model = build(path, "TupleViT", {"output": "twins"})
    torch.save(model.state_dict(), tmp_path / "w.pth")
    with pytest.raises(ModelCodeError, match=r"several \(batch, n\) tensors .* 'logits'"):
        load_model_code(make_spec(path, "TupleViT", {"output": "twins"}, tmp_path / "w.pth"))


def test_gradient_methods_target_the_log_probability(tmp_path: Path, photo: Path):
    """For a softmax model, ∂/∂A of vitviz's target is ∂ log p_c/∂A, the same as for the
    log-softmax model with the same weights."""
    maps = {}
    for output in ("softmax", "log_softmax"):
        path = write_source(tmp_path / output, RETURNS_FAMILY.source)
        model = build(path, "TupleViT", {"output": output})
        torch.save(model.state_dict(), tmp_path / output / "w.pth")
        spec = make_spec(path, "TupleViT", {"output": output}, tmp_path / output / "w.pth")
        a = analyze(load_model_code(spec), photo)
        maps[output] = (a.probs, a.gradient_rollout(target_class=1), a.relevance(target_class=1))
    for got, want in zip(maps["softmax"], maps["log_softmax"], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_output_kind_detection_holds_on_both_and_not_on_logits():
    from vitviz.modelcode.outputs import output_kind

    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(0)) * 4
    assert output_kind(logits) == "logits"
    assert output_kind(logits.softmax(-1)) == "probabilities"
    assert output_kind(logits.log_softmax(-1)) == "log-probabilities"
    assert output_kind(logits.sigmoid()) == "logits"  # ≥ 0 but rows don't sum to 1
    assert output_kind(logits.softmax(-1)[:, :1]) == "logits"  # one class: nothing to tell
    assert output_kind(-logits.abs()) == "logits"  # ≤ 0 but not a log-softmax


def test_cli_says_the_probability_is_the_models_own(tmp_path: Path, photo: Path, capsys):
    path = write_source(tmp_path, RETURNS_FAMILY.source)
    model = build(path, "TupleViT", {"output": "softmax"})
    torch.save(model.state_dict(), tmp_path / "w.pth")
    argv = ["explain", str(photo), "--model-code", f"{path}:TupleViT"]
    argv += ["--model-args", '{"output": "softmax"}', "--checkpoint", str(tmp_path / "w.pth")]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    assert ", the model's own probability) ->" in capsys.readouterr().err


# -- patches without a Conv2d; a batch size fixed inside forward --------------------------------


def test_rearrange_and_linear_patches_of_a_one_channel_model(tmp_path: Path, photo: Path):
    """No patch-size argument: p = 4 from the Linear's 16 inputs and one channel (the image
    size argument and no channel argument: p² over C = 1), checked against the tokens made."""
    path = write_source(tmp_path, REARRANGE_LINEAR)
    model = build(path, "Net", {})
    torch.save(model.state_dict(), tmp_path / "w.pth")
    loaded = load_model_code(make_spec(path, "Net", {}, tmp_path / "w.pth"))
    cfg = loaded.model.config
    assert (cfg.patch_size, cfg.in_channels, cfg.image_size, cfg.num_prefix_tokens) == (
        4,
        1,
        (28, 28),
        1,
    )
    assert any(
        "patch size 4 from the first Linear layer (16 inputs = 1×4×4), checked: it takes the "
        "49 patches of a 28×28 image" in n
        for n in loaded.notes
    )
    assert_opens_exactly(model, loaded, "Attention", photo)


def test_a_batch_size_fixed_in_forward_runs_padded_and_says_so(tmp_path: Path, photo: Path):
    """``x.view(64, 49, -1)`` in forward: each image runs with 63 copies of it; its own row of
    the logits and of the attention is kept, exactly the file's forward on a batch of 64."""
    path = write_source(tmp_path, FIXED_BATCH)
    line = path.read_text().splitlines().index("        x = x.view(64, 49, -1)") + 1
    model = build(path, "Net", {})
    torch.save(model.state_dict(), tmp_path / "w.pth")
    loaded = load_model_code(make_spec(path, "Net", {}, tmp_path / "w.pth"))
    assert (
        f"the forward pass fixes the batch size at 64 (model.py, line {line}: "
        "x = x.view(64, 49, -1)): vitviz runs each image with 63 copies of it and keeps its own "
        "row (checked: the rows don't mix)"
    ) in loaded.notes
    a = analyze(loaded, photo)
    x = torch.cat([a.input[None], torch.randn(63, 1, 28, 28)])  # any other rows
    with torch.no_grad():
        own = model(x)[:1]
    torch.testing.assert_close(a.logits[None], own, atol=1e-5, rtol=1e-5)
    hand = attention_by_hand(model, "Attention", x)
    for got, want in zip(a.attention, hand, strict=True):
        torch.testing.assert_close(got, want[0], atol=1e-6, rtol=5e-4)
    assert a.token_norms.shape == (2, 50) and float(a.token_norms.min()) > 0
    assert torch.isfinite(a.relevance()).all() and torch.isfinite(a.gradient_rollout()).all()
    many = torch.randn(70, 1, 28, 28)  # more than 64 images: in padded chunks
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.model(many),
            torch.cat([model(many[:64]), model(torch.cat([many[64:]] * 11)[:64])[:6]]),
        )


def test_a_fixed_batch_whose_rows_mix_is_refused(tmp_path: Path):
    source = FIXED_BATCH.replace(
        "        x = x.view(64, 49, -1)\n",
        "        x = x.view(64, 49, -1)\n        x = x - x.mean(0, keepdim=True)\n",
    )
    path = write_source(tmp_path, source)
    line = path.read_text().splitlines().index("        x = x.view(64, 49, -1)") + 1
    with pytest.raises(ModelCodeError) as info:
        load_model_code(make_spec(path, "Net", {}))
    assert str(info.value) == (
        f"the model's forward pass fixes the batch size at 64 (model.py, line {line}: "
        "x = x.view(64, 49, -1)), so it can't run on 1 image(s); vitviz runs one image or a "
        "few at a time: write x.shape[0] (or -1) there instead of 64; padding the batch won't "
        "do: its rows mix"
    )


def test_fixed_batch_is_read_only_from_a_view_of_the_batch():
    from vitviz.modelcode.errors import fixed_batch

    x = torch.zeros(1, 49, 16)
    for shape, want in (((64, 49, 16), 64), ((64, -1, 16), 64), ((1, 50, 16), None)):
        try:
            x.view(*shape)
        except RuntimeError as exc:
            assert fixed_batch(exc) == want, shape
        else:
            raise AssertionError(f"view{shape} ran")
    try:
        x.view(2, 49, 8)  # a wrong head split of one image, not a batch
    except RuntimeError as exc:
        assert fixed_batch(exc) is None
    assert fixed_batch(ValueError("shape '[64, 49, 16]' is invalid for input of size 784")) is None


# -- messages that lead somewhere --------------------------------------------------------------


def test_a_config_object_constructor_is_pointed_to_a_factory(tmp_path: Path):
    path = write_source(tmp_path, CONFIG_OBJECT)
    hint = (
        "ConfigViT takes a config object (config), which JSON arguments can't make: write a "
        "two-line factory in a file beside it, def make_model(): return ConfigViT(ViTConfig(...)), "
        "and open that with --model-code factory.py:make_model"
    )
    for args in ({}, {"config": {"depth": 2}}):  # nothing, or a dict where the object goes
        with pytest.raises(ModelCodeError) as info:
            load_model_code(make_spec(path, "ConfigViT", args))
        assert str(info.value).endswith(hint), args


def test_a_constructor_reading_a_script_global_is_pointed_to_a_factory(tmp_path: Path):
    source = MNIST_CONV.replace(
        "super().__init__()", "super().__init__()\n        dim = CFG.dim", 1
    )
    path = write_source(tmp_path, source)
    with pytest.raises(ModelCodeError) as info:
        load_model_code(make_spec(path, "MnistViT", {}))
    assert str(info.value).endswith(
        "MnistViT reads the global 'CFG', which the file does not define when imported (a "
        "script sets it): write a two-line factory that sets it first, def make_model(): "
        "model.CFG = ...; return model.MnistViT(...), and open factory.py:make_model"
    )


def test_missing_arguments_are_named_as_model_args(tmp_path: Path):
    source = MNIST_CONV.replace("in_channels=1, img_size=28,", "in_channels, img_size,")
    path = write_source(tmp_path, source)
    with pytest.raises(ModelCodeError) as info:
        load_model_code(make_spec(path, "MnistViT", {"img_size": 28}))
    assert str(info.value).endswith("give it in --model-args '{\"in_channels\": …}'")


def test_a_mismatched_state_dict_says_the_arguments_its_shapes_say(tmp_path: Path):
    path = write_source(tmp_path, MNIST_CONV)
    trained = build(path, "MnistViT", {"depth": 3, "num_classes": 7})
    torch.save({"model_state": trained.state_dict(), "epoch": 3}, tmp_path / "w.pth")
    with pytest.raises(ModelCodeError) as info:
        load_model_code(make_spec(path, "MnistViT", {}, tmp_path / "w.pth"))
    message = str(info.value)
    assert message.startswith(
        "w.pth (the state dict under 'model_state') does not match the model MnistViT"
    )
    assert message.endswith('its shapes say --model-args \'{"num_classes": 7, "depth": 3}\'')
    args = {"num_classes": 7, "depth": 3}
    loaded = load_model_code(make_spec(path, "MnistViT", args, tmp_path / "w.pth"))
    assert (loaded.model.config.depth, loaded.model.config.num_classes) == (3, 7)


def test_too_few_tokens_and_wrong_prefix_name_the_settings(tmp_path: Path):
    path = write_source(tmp_path, MNIST_CONV)
    with pytest.raises(ModelCodeError) as info:
        load_model_code(make_spec(path, "MnistViT", {}, settings={"num_prefix_tokens": 3}))
    assert str(info.value) == (
        "no attention over 19 tokens was seen (sizes seen: [17]); give it in the settings: "
        '--config FILE.json holding {"num_prefix_tokens": 1} (in the window: Prefix tokens)'
    )


def test_the_documented_factory_opens_a_config_object_constructor(tmp_path: Path):
    doc = Path(__file__).resolve().parents[2] / "docs" / "model-code.md"
    text = doc.read_text(encoding="utf-8")
    block = text.split("```python\n# factory.py\n", 1)[1].split("```", 1)[0]
    source = CONFIG_OBJECT.replace("ConfigViT", "ViT")
    path = write_source(tmp_path, source)
    factory = write_source(tmp_path, block, "factory.py")
    loaded = load_model_code(make_spec(factory, "make_vit", {"depth": 3}))
    cfg = loaded.model.config
    assert (cfg.depth, cfg.image_size, cfg.patch_size, cfg.num_classes) == (3, (28, 28), 7, 10)
    assert path.is_file()


def test_a_factory_imports_its_own_folders_model_not_an_earlier_one(tmp_path: Path):
    """Two projects, each with model.py and factory.py, opened one after the other in one
    session: each factory gets its own folder's model (the first one's is not reused)."""
    depths = []
    for depth in (2, 3):
        folder = tmp_path / f"project{depth}"
        write_source(folder, CONFIG_OBJECT.replace("depth: int = 2", f"depth: int = {depth}"))
        make = "from model import ConfigViT, ViTConfig\n\n\ndef make_vit():\n"
        make += "    return ConfigViT(ViTConfig())\n"
        factory = write_source(folder, make, "factory.py")
        depths.append(load_model_code(make_spec(factory, "make_vit")).model.config.depth)
    assert depths == [2, 3]


def test_a_one_head_model_still_opens(tmp_path: Path, photo: Path):
    """One (B, N, N) softmax per block is one head per layer, not heads taken for layers."""
    path = write_source(tmp_path, MNIST_CONV)
    model = build(path, "MnistViT", {"heads": 1})
    torch.save(model.state_dict(), tmp_path / "w.pth")
    loaded = load_model_code(make_spec(path, "MnistViT", {"heads": 1}, tmp_path / "w.pth"))
    assert (loaded.model.config.depth, loaded.model.config.heads) == (2, 1)
    assert_opens_exactly(model, loaded, "Attention", photo)
