"""A Hugging Face CLIPModel folder opens as the CLIP kind: prompts typed are its
classes, and the logits, the image tower's attention and the embeddings equal the library's;
relevance targets a prompt's logit (y = logits_per_image[prompt], the library's own autograd
in the float64 reference). Random weights (biases and norms too) and a tokenizer learnt in the
test: no hub."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from clip_fixtures import CORPUS, learn_bpe, save_openai_files, tiny_clip
from lrp_reference import library_block_relevances, z_plus

from vitviz.checkpoints import load_checkpoint
from vitviz.cli import main
from vitviz.kindapi import kind_of
from vitviz.pipeline.analysis import analyze

PROMPTS = ["a photo of a dog", "a photo of a cat on a sofa", "a red car"]
SIDE = 32  # the tiny tower's input (4 × 4 patches of 8)


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """A CLIPModel saved as Hugging Face saves one, beside the tokenizer's files."""
    from transformers import CLIPImageProcessor

    vocab, merges = learn_bpe(CORPUS, merges=150)
    model = tiny_clip(len(vocab), seed=4)
    with torch.no_grad():
        model.logit_scale.fill_(2.3)
    folder = tmp_path_factory.mktemp("clip")
    model.save_pretrained(folder)
    save_openai_files(folder, vocab, merges)
    proc = CLIPImageProcessor(size={"shortest_edge": SIDE}, crop_size=SIDE)
    proc.save_pretrained(folder)
    return folder, model


def _ids(folder: Path, prompts: list[str]) -> torch.Tensor:
    from vitviz.kinds.clip.text import pad_prompts
    from vitviz.kinds.clip.tokenizer import ClipTokenizer

    tok = ClipTokenizer.from_folder(folder, context_length=24)
    return pad_prompts([tok.encode(p) for p in prompts], tok.end_id)


def _library(model, pixels: torch.Tensor, ids: torch.Tensor):
    model.config._attn_implementation = "eager"
    model.vision_model.config._attn_implementation = "eager"
    return model(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        pixel_values=pixels,
        output_attentions=True,
    )


def test_a_clip_folder_opens_with_prompts_as_its_classes(clip_folder, photo_files) -> None:
    folder, reference = clip_folder
    loaded = load_checkpoint(folder)
    assert kind_of(loaded).name == "clip" and loaded.family == "huggingface-clip"
    assert kind_of(loaded).apply_prompts(loaded, PROMPTS) is None
    assert loaded.class_names == PROMPTS and loaded.model.config.num_classes == 3
    a = analyze(loaded, photo_files["chelsea"])
    assert a.kind == "clip" and a.grid == (4, 4)
    x = a.input[None]
    with torch.no_grad():
        out = _library(reference, x, _ids(folder, PROMPTS))
    torch.testing.assert_close(a.logits, out.logits_per_image[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a.probs, out.logits_per_image[0].softmax(-1), rtol=1e-4, atol=1e-6)
    theirs = out.vision_model_output.attentions
    for layer, attn in enumerate(theirs):
        torch.testing.assert_close(a.attention[layer], attn[0], rtol=0, atol=1e-5)
    with torch.no_grad():
        image = loaded.model.image_embedding(x)[0]
    torch.testing.assert_close(image, out.image_embeds[0], rtol=1e-4, atol=1e-5)


def test_new_prompts_never_rerun_the_image_tower(clip_folder, monkeypatch) -> None:
    folder, _ = clip_folder
    loaded = load_checkpoint(folder)
    kind = kind_of(loaded)
    calls = []
    tower = loaded.model.text
    monkeypatch.setattr(tower, "forward", lambda ids, f=tower.forward: calls.append(1) or f(ids))
    assert kind.apply_prompts(loaded, PROMPTS) is None
    assert kind.apply_prompts(loaded, PROMPTS[::-1]) is None  # cached by text
    assert kind.apply_prompts(loaded, [*PROMPTS, "a tree"]) is None
    assert len(calls) == 2 and loaded.class_names[-1] == "a tree"


def test_gradient_methods_target_a_prompts_logit(clip_folder, photo_files) -> None:
    """Chefer et al. 2021b from the definition, in float64, with y = logits_per_image[p] of the
    library and its autograd: R = I; R += Ē_h[(∇A ⊙ A)⁺] R per layer; the CLS row's patches,
    min-max scaled."""
    from vitviz.explain.methods import get_method

    folder, reference = clip_folder
    loaded = load_checkpoint(folder)
    kind_of(loaded).apply_prompts(loaded, PROMPTS)
    a = analyze(loaded, photo_files["coffee"], gradients=True)
    ours = get_method("relevance")(a, None, 1, {}).double()

    ref = reference.double()
    ids = _ids(folder, PROMPTS)
    out = _library(ref, a.input[None].double(), ids)
    attns = out.vision_model_output.attentions
    for t in attns:
        t.retain_grad()
    out.logits_per_image[0, 1].backward()
    n = attns[0].shape[-1]
    R = torch.eye(n, dtype=torch.float64)
    for t in attns:
        cam = (t.grad[0] * t[0]).clamp(min=0).mean(0)
        R = R + cam @ R
    want = R[0, 1:].reshape(4, 4).detach()
    want = (want - want.min()) / (want.max() - want.min())  # min-max scaled (DESIGN §5)
    torch.testing.assert_close(ours, want, rtol=1e-5, atol=1e-6)
    other = get_method("relevance")(a, None, 0, {}).double()  # another prompt: another map
    assert not torch.allclose(other, want, atol=1e-3)
    # gradient rollout: Â_l = (mean_h(A_l ⊙ G_l))⁺, Ã_l = rownorm(Â_l + I), R = Ã_L ⋯ Ã_1,
    # the CLS row's patches scaled to max 1 (DESIGN §5)
    chain = torch.eye(n, dtype=torch.float64)
    for t in attns:
        m = (t.grad[0] * t[0]).mean(0).clamp(min=0) + torch.eye(n, dtype=torch.float64)
        chain = (m / m.sum(-1, keepdim=True)) @ chain
    roll = chain[0, 1:].reshape(4, 4).detach()
    mine = get_method("gradient-rollout")(a, None, 1, {}).double()
    torch.testing.assert_close(mine, roll / roll.max(), rtol=1e-5, atol=1e-6)

    # Grad-SAM: mean over l, h of (G_l⁺ ⊙ A_l)[CLS, patches]; attention Grad-CAM: the last
    # layer's A_L[h, CLS, patches] weighted by the mean of G_L[h, CLS, patches], ReLU of the
    # mean over heads; both min-max scaled (DESIGN §5, the table's scaling)
    def min_max(m):
        return (m - m.min()) / (m.max() - m.min())

    sam = torch.stack([(t.grad[0].clamp(min=0) * t[0]).detach() for t in attns]).mean((0, 1))
    got = get_method("grad-sam")(a, None, 1, {}).double()
    torch.testing.assert_close(got, min_max(sam[0, 1:].reshape(4, 4)), rtol=1e-5, atol=1e-6)
    last, g_last = attns[-1][0].detach(), attns[-1].grad[0]
    weights = g_last[:, 0, 1:].mean(-1)  # (H,)
    cam = (weights[:, None] * last[:, 0, 1:]).mean(0).clamp(min=0).reshape(4, 4)
    got = get_method("attention-gradcam")(a, None, 1, {}).double()
    torch.testing.assert_close(got, min_max(cam), rtol=1e-5, atol=1e-6)


def test_every_method_a_clip_tower_has_runs_and_the_rest_say_why(clip_folder, photo_files):
    from vitviz.explain.methods import all_methods

    loaded = load_checkpoint(clip_folder[0])
    kind_of(loaded).apply_prompts(loaded, PROMPTS)
    a = analyze(loaded, photo_files["chelsea"], gradients=True)
    ran = []
    for method in all_methods():
        why = method.unavailable(a)
        if why is None:
            out = method(a, None, 2, {}, strict=False)
            assert out.shape[:2] == (4, 4) and torch.isfinite(out).all(), method.name
            ran.append(method.name)
    assert {"relevance", "gradient-rollout", "grad-sam", "attention-gradcam", "gradcam",
            "rollout", "attention", "transformer-attribution"} <= set(ran)  # fmt: skip


def get_method_reason(analysis, name: str) -> str:
    from vitviz.explain.methods import get_method

    why = get_method(name).unavailable(analysis)
    assert why is not None
    return why


def test_explain_takes_prompts_and_writes_the_embeddings(clip_folder, photo_files, tmp_path):
    folder, _ = clip_folder
    prompts_file = tmp_path / "prompts.txt"
    prompts_file.write_text("dog\ncat on a sofa\n\n")
    out = tmp_path / "out"
    argv = ["explain", str(photo_files["chelsea"]), "--checkpoint", str(folder),
            "--prompts", str(prompts_file), "--prompt", "car", "--template", "a photo of a {}",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    with np.load(out / "chelsea.npz") as z:
        assert str(z["kind"]) == "clip"
        assert list(z["class_names"]) == [
            "a photo of a dog", "a photo of a cat on a sofa", "a photo of a car"
        ]  # fmt: skip
        assert z["logits"].shape == (3,) and z["text_embeddings"].shape == (3, 16)
        np.testing.assert_allclose(np.linalg.norm(z["image_embedding"]), 1.0, rtol=1e-5)
        assert np.isfinite(z["relevance"]).all()


def test_prompts_on_a_vit_are_refused_in_one_line(tiny_ckpt, photo_files, tmp_path, capsys):
    argv = ["explain", str(photo_files["chelsea"]), "--checkpoint", str(tiny_ckpt),
            "--prompt", "a dog", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "--prompt" in err and "text tower" in err and "Traceback" not in err


def test_a_clip_folder_without_tokenizer_files_says_so(clip_folder, tmp_path) -> None:
    folder, _ = clip_folder
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        (bare / name).write_bytes((folder / name).read_bytes())
    loaded = load_checkpoint(bare)
    why = kind_of(loaded).apply_prompts(loaded, PROMPTS)
    assert why is not None and "tokenizer" in why
    assert json.loads((bare / "config.json").read_text())["model_type"] == "clip"


@pytest.mark.parametrize("projection", [True, False], ids=["with-projection", "features"])
def test_an_image_tower_alone_opens_without_prompts(projection, tmp_path, photo_files) -> None:
    """CLIPVisionModelWithProjection / CLIPVisionModel folders: the attention and the image
    embedding (the features, normalised, where there is no projection) equal the library's;
    prompts are refused with the reason."""
    from transformers import CLIPVisionConfig, CLIPVisionModel, CLIPVisionModelWithProjection

    torch.manual_seed(6)
    config = CLIPVisionConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                              num_attention_heads=4, image_size=SIDE, patch_size=8,
                              projection_dim=16, attn_implementation="eager")  # fmt: skip
    model = (CLIPVisionModelWithProjection if projection else CLIPVisionModel)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.normal_(0.0, 0.2)
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path)
    assert kind_of(loaded).name == "clip"
    why = kind_of(loaded).apply_prompts(loaded, PROMPTS)
    assert why is not None and "text tower" in why
    a = analyze(loaded, photo_files["chelsea"])
    assert not a.has_head
    with torch.no_grad():
        out = model(pixel_values=a.input[None], output_attentions=True)
        ours = loaded.model.image_embedding(a.input[None])[0]
    theirs = out.image_embeds[0] if projection else out.pooler_output[0]
    torch.testing.assert_close(ours, theirs / theirs.norm(), rtol=1e-4, atol=1e-5)
    for layer, attn in enumerate(out.attentions):
        torch.testing.assert_close(a.attention[layer], attn[0], rtol=0, atol=1e-5)


def test_faithfulness_and_stats_take_a_clip_like_any_vit(clip_folder, photo_files, tmp_path):
    """Faithfulness per prompt (--prompt; the curves read the chosen prompt's score) and folder
    statistics run on a CLIP through the kind interface, nothing special-cased."""
    import csv
    import shutil

    folder, _ = clip_folder
    out = tmp_path / "faith"
    argv = ["faithfulness", str(photo_files["chelsea"]), "--checkpoint", str(folder),
            "--prompt", "a dog", "--prompt", "a cat", "--steps", "4", "--method", "rollout",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((out / "faithfulness.json").read_text())
    loaded = load_checkpoint(folder)
    kind_of(loaded).apply_prompts(loaded, ["a dog", "a cat"])
    top = analyze(loaded, photo_files["chelsea"]).top_class
    assert report["images"][0]["target_class"] == top
    images = tmp_path / "images"
    images.mkdir()
    for name in ("chelsea", "coffee"):
        shutil.copy(photo_files[name], images / photo_files[name].name)
    stats = tmp_path / "stats"
    assert main(["stats", str(images), "--checkpoint", str(folder), "--out", str(stats)]) == 0
    with open(stats / "stats.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert len(rows) == 2 * 4  # layers × heads of the tiny tower


def test_target_names_the_prompt_explained(clip_folder, photo_files, tmp_path, capsys) -> None:
    """--target TEXT (as typed, before --template): explain's maps and faithfulness's curves
    are that prompt's; a text that is none of the prompts exits 2 in one line."""
    folder, _ = clip_folder
    image = str(photo_files["chelsea"])
    common = ["--checkpoint", str(folder), "--prompt", "dog", "--prompt", "cat on a sofa",
              "--prompt", "car", "--template", "a photo of a {}"]  # fmt: skip
    for target, index in (("car", 2), ("a photo of a dog", 0)):
        out = tmp_path / f"explain-{index}"
        assert main(["explain", image, *common, "--target", target, "--out", str(out)]) == 0
        with np.load(out / "chelsea.npz") as z:
            assert int(z["target_class"]) == index
    for target, index in (("cat on a sofa", 1), ("car", 2), ("dog", 0)):  # not only the top
        faith = tmp_path / f"faith-{index}"
        argv = ["faithfulness", image, *common, "--target", target, "--steps", "4",
                "--method", "rollout", "--out", str(faith)]  # fmt: skip
        assert main(argv) == 0
        report = json.loads((faith / "faithfulness.json").read_text())
        assert report["images"][0]["target_class"] == index
    capsys.readouterr()
    assert main(["explain", image, *common, "--target", "a tree", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--target 'a tree' is none of the prompts" in err and "Traceback" not in err


def test_rescore_gives_a_fresh_analysiss_numbers_without_the_image_tower(
    clip_folder, photo_files
) -> None:
    folder, _ = clip_folder
    loaded = load_checkpoint(folder)
    kind = kind_of(loaded)
    a = analyze(loaded, photo_files["coffee"])  # no prompts yet: no head
    assert a.logits.numel() == 0 and kind.rescore(a, loaded) is None
    kind.apply_prompts(loaded, PROMPTS)
    b = kind.rescore(a, loaded)
    fresh = analyze(loaded, photo_files["coffee"])
    torch.testing.assert_close(b.logits, fresh.logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b.probs, fresh.probs, rtol=1e-5, atol=1e-7)
    assert b.class_names == PROMPTS and torch.equal(b.attention, a.attention)
    kind.apply_prompts(loaded, PROMPTS[::-1])
    c = kind.rescore(b, loaded)
    torch.testing.assert_close(c.logits, fresh.logits.flip(0), rtol=1e-5, atol=1e-6)


GRADIENT_MAPS = ("relevance", "gradient-rollout", "grad-sam", "attention-gradcam")


def count_tower_passes(model, monkeypatch) -> list[int]:
    """Each forward pass of ``model``'s image tower appends to the list returned."""
    runs: list[int] = []
    for name in ("forward_features", "forward_explained"):
        original = getattr(model, name)
        monkeypatch.setattr(model, name, lambda *a, f=original, **k: runs.append(1) or f(*a, **k))
    return runs


def test_a_new_prompts_gradient_maps_are_one_backward_pass_through_the_kept_graph(
    clip_folder, photo_files, monkeypatch
) -> None:
    """The analysis keeps its forward pass's graph (parameters out of it): after new prompts
    are scored (rescore), a new prompt's relevance, gradient rollout, Grad-SAM and attention
    Grad-CAM run no image-tower pass, make no weight gradient, and equal those of an analysis
    made from scratch (a forward pass with autograd and a backward pass) for that prompt."""
    from vitviz.explain.methods import get_method
    from vitviz.kinds.vit.analysis import analyze_vit

    folder, _ = clip_folder
    loaded = load_checkpoint(folder)
    kind, model = kind_of(loaded), loaded.model
    kind.apply_prompts(loaded, PROMPTS)
    a = analyze(loaded, photo_files["coffee"])
    assert a.graph is not None and a.graph.saved_bytes(model) > 0
    assert kind.apply_prompts(loaded, [*PROMPTS, "a tree in the snow"]) is None
    b = kind.rescore(a, loaded)
    assert b.graph is a.graph
    runs = count_tower_passes(model, monkeypatch)
    maps = {m: get_method(m)(b, None, 3, {}) for m in GRADIENT_MAPS}
    maps["relevance-0"] = get_method("relevance")(b, None, 0, {})
    assert runs == []  # one backward pass per prompt, no forward pass of the tower
    assert all(p.grad is None and p.requires_grad for p in model.parameters())
    monkeypatch.undo()
    fresh = analyze_vit(loaded, photo_files["coffee"], gradients=True)  # no graph kept
    assert fresh.graph is None
    for m in GRADIENT_MAPS:
        torch.testing.assert_close(maps[m], get_method(m)(fresh, None, 3, {}), rtol=1e-5,
                                   atol=1e-6)  # fmt: skip
    want = get_method("relevance")(fresh, None, 0, {})
    torch.testing.assert_close(maps["relevance-0"], want, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(maps["relevance"], want, atol=1e-3)  # each prompt its own map


def test_transformer_attribution_through_the_cosine_head(clip_folder, photo_files) -> None:
    """Transformer attribution of a prompt, in float64 from its definition on the library's
    modules: y_c = s·(t̂_c·v)/|v| with |v| held constant, so LRP-0 gives R_v = (s/|v|)·t̂_c ⊙ v;
    the projection by the z⁺ rule, the post-LayerNorm unchanged, the CLS token's share, then
    each block (z⁺ Linears, LayerNorm and activation unchanged, residual adds rescaled, A·V
    and Q·Kᵀ halved); Ā_l = mean_h((G_l ⊙ R_A^l)⁺), G_l by the library's autograd of
    logits_per_image[c]; R = I; R += Ā_l·R; the CLS row's patches, min-max scaled."""
    from vitviz.explain.methods import get_method

    folder, reference = clip_folder
    loaded = load_checkpoint(folder)
    kind_of(loaded).apply_prompts(loaded, PROMPTS)
    a = analyze(loaded, photo_files["coffee"])
    ref = reference.double()
    ref.config._attn_implementation = "eager"
    ref.vision_model.config._attn_implementation = "eager"
    ids = _ids(folder, PROMPTS)
    pixels = a.input[None].double()
    out = ref(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixels,
              output_attentions=True, output_hidden_states=True)  # fmt: skip
    for c in (1, 2):
        attns = out.vision_model_output.attentions
        grads = torch.autograd.grad(out.logits_per_image[0, c], attns, retain_graph=True)
        with torch.no_grad():
            hidden = out.vision_model_output.hidden_states
            vm = ref.vision_model
            p = vm.post_layernorm(hidden[-1][:, 0])  # (1, D)
            v = ref.visual_projection(p)  # (1, E)
            t = out.text_embeds[c] / out.text_embeds[c].norm()
            r_v = ref.logit_scale.exp() / v.norm() * t * v
            torch.testing.assert_close(r_v.sum(), out.logits_per_image[0, c])  # sums to y_c
            r = torch.zeros_like(hidden[-1])
            r[:, 0] = z_plus(p, ref.visual_projection.weight, r_v)  # post-LN: unchanged
            rel = library_block_relevances(vm.encoder.layers, hidden, r)
            n = attns[0].shape[-1]
            R = torch.eye(n, dtype=torch.float64)
            for g, ra in zip(grads, rel, strict=True):
                R = R + (g[0] * ra[0]).clamp(min=0).mean(0) @ R
            want = R[0, 1:].reshape(4, 4)
            want = (want - want.min()) / (want.max() - want.min())
        ours = get_method("transformer-attribution")(a, None, c, {}).double()
        torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-5)


def test_the_kept_graph_goes_with_its_analysis(clip_folder, photo_files) -> None:
    """Nothing but the analysis (and its rescored copies) holds the graph: one image's, freed
    with it (the window's engine holds one analysis, dropped when the image or model changes)."""
    import gc
    import weakref

    loaded = load_checkpoint(clip_folder[0])
    kind = kind_of(loaded)
    kind.apply_prompts(loaded, PROMPTS)
    a = analyze(loaded, photo_files["coffee"], gradients=True)
    kind.apply_prompts(loaded, PROMPTS[:2])
    b = kind.rescore(a, loaded)
    b.relevance(1)
    held = weakref.ref(a.graph.tokens)
    del a
    gc.collect()
    assert held() is not None  # the rescored analysis still holds it
    del b
    gc.collect()
    assert held() is None
