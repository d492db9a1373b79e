"""A Hugging Face SiglipModel folder opens as the CLIP kind: no CLS token, a probe
token pools; each prompt's probability is its own sigmoid; the logits, the image tower's
attention and the probe's attention equal the library's; the maps start from the probe's row
(rollout, gradient rollout and relevance checked from their definitions in float64, with the
library's autograd for the gradients). The tokenizer is SentencePiece's Unigram, read from a
tokenizer.json learnt in the test with the ``tokenizers`` library; random weights (biases and
norms too), no hub."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vitviz.checkpoints import load_checkpoint
from vitviz.cli import main
from vitviz.kindapi import kind_of
from vitviz.pipeline.analysis import analyze

PROMPTS = ["a photo of a dog", "A cat on a SOFA!", "a red car"]
CONTEXT = 16  # the tiny text tower's length (prompts are padded to it)
PAD = 1  # SigLIP pads with its end token "</s>"
CORPUS = [
    "a photo of a dog on a sofa. a photo of a cat! two cats and 3 dogs",
    "the quick brown fox jumps over the lazy dog, it's a dog's life",
    "a red car, a blue bird, a green tree, a bowl of fruit, a coffee cup",
    "café naïve résumé in a living room; (brackets) [x] {y} #tag @user",
] * 4
PUNCTUATION = r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]"  # SigLIP's canonicalisation drops it


def learn_unigram(vocab_size: int = 150):
    """A Unigram tokenizer as SigLIP's: punctuation dropped, lower case, spaces collapsed,
    Metaspace "▁" prepended, "</s>" appended."""
    from tokenizers import (
        Regex,
        Tokenizer,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.Replace(Regex(PUNCTUATION), ""),
            normalizers.Lowercase(),
            normalizers.Replace(Regex(r"\s+"), " "),
            normalizers.Strip(),
        ]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    tok.train_from_iterator(CORPUS, trainer)
    eos = tok.token_to_id("</s>")
    assert eos == PAD
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", eos)]
    )
    return tok


def tiny_siglip(vocab_size: int, seed: int = 0):
    """A SiglipModel with random weights (biases, norms and the probe too)."""
    from transformers import SiglipConfig, SiglipModel

    torch.manual_seed(seed)
    text = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=CONTEXT,
                pad_token_id=PAD, eos_token_id=PAD)  # fmt: skip
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, image_size=32, patch_size=8)  # fmt: skip
    model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.normal_(0.0, 0.2)
                if "norm" in name and name.endswith("weight"):
                    p.add_(1.0)
        model.logit_scale.fill_(2.0)
        model.logit_bias.fill_(-1.5)
    return model


@pytest.fixture(scope="module")
def siglip_folder(tmp_path_factory: pytest.TempPathFactory):
    """A SiglipModel saved as Hugging Face saves one, beside its tokenizer.json."""
    tok = learn_unigram()
    model = tiny_siglip(tok.get_vocab_size(), seed=5)
    folder = tmp_path_factory.mktemp("siglip")
    model.save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    proc = {"image_processor_type": "SiglipImageProcessor", "do_resize": True,
            "size": {"height": 32, "width": 32}, "resample": 2, "do_rescale": True,
            "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5] * 3,
            "image_std": [0.5] * 3}  # fmt: skip
    (folder / "preprocessor_config.json").write_text(json.dumps(proc))
    return folder, model, tok


def _ids(tok, prompts: list[str]) -> torch.Tensor:
    """The library tokenizer's ids, padded to the tower's length as SigLIP was trained."""
    rows = [tok.encode(p).ids for p in prompts]
    return torch.tensor([r + [PAD] * (CONTEXT - len(r)) for r in rows])


def _library(model, pixels: torch.Tensor, ids: torch.Tensor):
    model.config._attn_implementation = "eager"
    model.vision_model.config._attn_implementation = "eager"
    model.text_model.config._attn_implementation = "eager"
    return model(input_ids=ids, pixel_values=pixels, output_attentions=True)


def _probe_row(model, hidden: torch.Tensor) -> torch.Tensor:
    """The library's MAP head's attention weights per head, (B, H, N)."""
    head = model.vision_model.head
    probe = head.probe.repeat(hidden.shape[0], 1, 1)
    _, weights = head.attention(probe, hidden, hidden, average_attn_weights=False)
    return weights[:, :, 0]


def test_a_siglip_folder_opens_with_sigmoid_prompts(siglip_folder, photo_files) -> None:
    folder, reference, tok = siglip_folder
    loaded = load_checkpoint(folder)
    kind = kind_of(loaded)
    assert kind.name == "clip" and loaded.family == "huggingface-siglip"
    assert kind.apply_prompts(loaded, PROMPTS) is None and loaded.class_names == PROMPTS
    a = analyze(loaded, photo_files["chelsea"])
    assert a.grid == (4, 4) and a.num_prefix_tokens == 0
    x = a.input[None]
    with torch.no_grad():
        out = _library(reference, x, _ids(tok, PROMPTS))
        probe = _probe_row(reference, out.vision_model_output.last_hidden_state)
    theirs = out.logits_per_image[0]
    torch.testing.assert_close(a.logits, theirs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a.probs, torch.sigmoid(theirs), rtol=1e-4, atol=1e-6)
    assert abs(float(a.probs.sum()) - 1.0) > 1e-3  # each its own sigmoid, not a softmax
    for layer, attn in enumerate(out.vision_model_output.attentions):
        torch.testing.assert_close(a.attention[layer], attn[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(a.probe_attention, probe[0], rtol=0, atol=1e-5)
    with torch.no_grad():
        image = loaded.model.image_embedding(x)[0]
    torch.testing.assert_close(image, out.image_embeds[0], rtol=1e-4, atol=1e-5)
    assert "SigLIP" in kind.model_shape(loaded).headline
    assert loaded.model.config.outputs == "sigmoid"  # the window's chart names the sigmoid


def test_the_unigram_tokenizer_gives_the_librarys_ids(siglip_folder, tmp_path) -> None:
    from vitviz.kinds.clip.siglip_tokenizer import UnigramTokenizer
    from vitviz.kinds.clip.tokenizer import TokenizerError

    folder, _, tok = siglip_folder
    mine = UnigramTokenizer.from_folder(folder)
    texts = [*PROMPTS, "", "   ", "Two  CATS,  and 3 dogs...", "zebra xylophone qq", "café",
             "日本 の dog", "a</s>b", "it's a dog's life", "▁a ▁▁ photo",
             "coffee-cup's"]  # fmt: skip
    for text in texts:
        assert mine.encode(text) == tok.encode(text).ids, text
    assert any(2 in mine.encode(t) for t in texts)  # unknown pieces were exercised
    spiece = tmp_path / "spiece"
    spiece.mkdir()
    (spiece / "spiece.model").write_bytes(b"\x0a\x00")
    with pytest.raises(TokenizerError, match=r"tokenizer\.json"):
        UnigramTokenizer.from_folder(spiece)


def test_a_wrong_piece_score_changes_the_ids(siglip_folder, tmp_path) -> None:
    """Viterbi reads the scores: making one long piece cheap changes a segmentation."""
    from vitviz.kinds.clip.siglip_tokenizer import UnigramTokenizer

    folder = siglip_folder[0]
    data = json.loads((folder / "tokenizer.json").read_text())
    mine = UnigramTokenizer(data)
    before = mine.encode("a photo of a dog")
    long = max(
        (i for i, (p, _) in enumerate(data["model"]["vocab"]) if len(p) > 2 and i in before[:-1]),
        key=lambda i: len(data["model"]["vocab"][i][0]),
    )
    data["model"]["vocab"][long][1] = -1000.0
    assert long not in UnigramTokenizer(data).encode("a photo of a dog")


def _references(reference, tok, x: torch.Tensor, target: int):
    """float64: the library's attentions with their gradients of y = logits_per_image[target],
    and the probe's attention A_p (H, N) with G_p, the head's last step recomposed from the
    library's own modules (checked equal to its logits)."""
    ref = reference.double()
    out = _library(ref, x.double(), _ids(tok, PROMPTS))
    attns = out.vision_model_output.attentions
    for t in attns:
        t.retain_grad()
    hidden = out.vision_model_output.last_hidden_state
    head = ref.vision_model.head
    weights = _probe_row(ref, hidden)  # (1, H, N), in the graph from the hidden states
    weights.retain_grad()
    D, H = hidden.shape[-1], weights.shape[1]
    wv, bv = head.attention.in_proj_weight[2 * D :], head.attention.in_proj_bias[2 * D :]
    v = (hidden @ wv.T + bv).reshape(1, -1, H, D // H).transpose(1, 2)  # (1, H, N, hd)
    h = head.attention.out_proj((weights[:, :, None] @ v).reshape(1, D))
    pooled = h + head.mlp(head.layernorm(h))
    image = pooled / pooled.norm(dim=-1, keepdim=True)
    y = (image @ out.text_embeds.T) * ref.logit_scale.exp() + ref.logit_bias
    torch.testing.assert_close(y[0], out.logits_per_image[0], rtol=1e-10, atol=1e-10)
    y[0, target].backward()
    return attns, weights[0], weights.grad[0]


def test_maps_start_from_the_probes_row(siglip_folder, photo_files) -> None:
    from vitviz.explain.methods import get_method

    folder, reference, tok = siglip_folder
    loaded = load_checkpoint(folder)
    kind_of(loaded).apply_prompts(loaded, PROMPTS)
    a = analyze(loaded, photo_files["coffee"], gradients=True)
    attns, A_p, G_p = _references(reference, tok, a.input[None], target=1)
    n = attns[0].shape[-1]
    eye = torch.eye(n, dtype=torch.float64)

    # raw attention, last layer, no query: the probe's attention (mean over heads for -1)
    raw = get_method("attention")(a, None, 1, {"layer": -1, "head": -1})
    torch.testing.assert_close(raw.double(), A_p.mean(0).reshape(4, 4).detach(), atol=1e-5,
                               rtol=0)  # fmt: skip
    # rollout: s = mean_h(A_p); Ã_l = rownorm(mean_h(A_l) + I); s·Ã_L⋯Ã_1, scaled to max 1
    chain = eye
    for t in attns:
        m = t[0].mean(0) + eye
        chain = (m / m.sum(-1, keepdim=True)) @ chain
    want = (A_p.mean(0) @ chain).reshape(4, 4).detach()
    ours = get_method("rollout")(a, None, 1, {}).double()
    torch.testing.assert_close(ours, want / want.max(), rtol=1e-5, atol=1e-6)
    # gradient rollout: s = (mean_h(A_p ⊙ G_p))⁺, Â_l = (mean_h(A_l ⊙ G_l))⁺
    chain = eye
    for t in attns:
        m = (t.grad[0] * t[0]).mean(0).clamp(min=0) + eye
        chain = (m / m.sum(-1, keepdim=True)) @ chain
    want = ((A_p * G_p).mean(0).clamp(min=0) @ chain).reshape(4, 4).detach()
    ours = get_method("gradient-rollout")(a, None, 1, {}).double()
    torch.testing.assert_close(ours, want / want.max(), rtol=1e-5, atol=1e-6)
    # relevance: s = mean_h((G_p ⊙ A_p)⁺); R = I; R += Ē_h[(∇A ⊙ A)⁺] R; s·R, min-max
    R = eye
    for t in attns:
        R = R + (t.grad[0] * t[0]).clamp(min=0).mean(0) @ R
    want = ((G_p * A_p).clamp(min=0).mean(0) @ R).reshape(4, 4).detach()
    want = (want - want.min()) / (want.max() - want.min())
    ours = get_method("relevance")(a, None, 1, {}).double()
    torch.testing.assert_close(ours, want, rtol=1e-5, atol=1e-6)
    other = get_method("relevance")(a, None, 0, {}).double()  # another prompt: another map
    assert not torch.allclose(other, want, atol=1e-3)


def test_every_method_a_siglip_has_runs_and_the_rest_say_why(siglip_folder, photo_files):
    from vitviz.explain.methods import all_methods

    loaded = load_checkpoint(siglip_folder[0])
    kind_of(loaded).apply_prompts(loaded, PROMPTS)
    a = analyze(loaded, photo_files["chelsea"], gradients=True)
    ran = []
    for method in all_methods():
        why = method.unavailable(a)
        if why is None:
            for query in (None, (1, 2)):
                out = method(a, query, 2, {}, strict=False)
                shape = (4, 4, 3) if method.map_kind == "rgb" else (4, 4)
                assert out.shape == shape and torch.isfinite(out).all(), method.name
            ran.append(method.name)
        else:
            assert why.strip(), method.name
    assert {"relevance", "gradient-rollout", "rollout", "attention",
            "transformer-attribution"} <= set(ran)  # fmt: skip


def test_transformer_attribution_through_the_probe_and_the_sigmoid_head(
    siglip_folder, photo_files
) -> None:
    """Transformer attribution of a prompt, in float64 from its definition on the library's
    modules: y_c − b = s·(t̂_c·v)/|v| with |v| held constant gives R_v = (s/|v|)·t̂_c ⊙ v at the
    pooled v; the pool's residual MLP (add rescaled, z⁺ Linears, LayerNorm unchanged, fork
    added), out_proj by z⁺, a·V and q·Kᵀ halved (q's share stays with the probe), k and v by z⁺
    to the tokens; the post-LayerNorm unchanged; each block as a CLIP's. s_p =
    mean_h((G_p ⊙ R_p)⁺), R = I; R += Ā_l·R; the map s_p·R, min-max scaled."""
    from lrp_reference import add_z, half_z, library_block_relevances, z_plus

    from vitviz.explain.methods import get_method

    folder, reference, tok = siglip_folder
    loaded = load_checkpoint(folder)
    kind_of(loaded).apply_prompts(loaded, PROMPTS)
    a = analyze(loaded, photo_files["coffee"])
    ref = reference.double()
    out = _library(ref, a.input[None].double(), _ids(tok, PROMPTS))
    vm, head = ref.vision_model, ref.vision_model.head
    for c in (1, 2):
        attns, A_p, G_p = _references(reference, tok, a.input[None], target=c)
        with torch.no_grad():
            hidden = vm(pixel_values=a.input[None].double(), output_hidden_states=True)
            tokens = vm.post_layernorm(hidden.hidden_states[-1])  # (1, N, D)
            N, D = tokens.shape[1:]
            H = A_p.shape[0]
            hd = D // H
            w, b = head.attention.in_proj_weight, head.attention.in_proj_bias
            q = (head.probe @ w[:D].T + b[:D]).reshape(1, 1, H, hd).transpose(1, 2)
            k = (tokens @ w[D : 2 * D].T + b[D : 2 * D]).reshape(1, N, H, hd).transpose(1, 2)
            v = (tokens @ w[2 * D :].T + b[2 * D :]).reshape(1, N, H, hd).transpose(1, 2)
            attn = ((q * hd**-0.5) @ k.transpose(-2, -1)).softmax(-1)  # (1, H, 1, N)
            torch.testing.assert_close(attn[0, :, 0], A_p.detach())
            ctx = (attn @ v).reshape(1, D)
            h = head.attention.out_proj(ctx)
            ln = head.layernorm(h)
            hid = head.mlp.activation_fn(head.mlp.fc1(ln))
            m = head.mlp.fc2(hid)
            pooled = h + m
            t = out.text_embeds[c] / out.text_embeds[c].norm()
            r_v = ref.logit_scale.exp() / pooled.norm() * t * pooled
            torch.testing.assert_close(r_v.sum(), out.logits_per_image[0, c] - ref.logit_bias[0])
            r_h, r_m = add_z(h, m, r_v)
            r_h = r_h + z_plus(ln, head.mlp.fc1.weight, z_plus(hid, head.mlp.fc2.weight, r_m))
            r_ctx = z_plus(ctx, head.attention.out_proj.weight, r_h).reshape(1, H, 1, hd)
            r_p, r_v_tok = half_z(attn, v, r_ctx)
            _, r_kt = half_z(q, k.transpose(-2, -1), r_p)
            r = z_plus(
                tokens, w[D : 2 * D], r_kt.transpose(-2, -1).transpose(1, 2).reshape(1, N, D)
            )
            r = r + z_plus(tokens, w[2 * D :], r_v_tok.transpose(1, 2).reshape(1, N, D))
            rel = library_block_relevances(vm.encoder.layers, hidden.hidden_states, r)
            R = torch.eye(N, dtype=torch.float64)
            for g, ra in zip((layer.grad for layer in attns), rel, strict=True):
                R = R + (g[0] * ra[0]).clamp(min=0).mean(0) @ R
            s_p = (G_p * r_p[0, :, 0]).clamp(min=0).mean(0)
            want = (s_p @ R).reshape(4, 4)
            want = (want - want.min()) / (want.max() - want.min())
        ours = get_method("transformer-attribution")(a, None, c, {}).double()
        torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-5)


def test_explain_writes_the_probe_row(siglip_folder, photo_files, tmp_path) -> None:
    out = tmp_path / "out"
    argv = ["explain", str(photo_files["chelsea"]), "--checkpoint", str(siglip_folder[0]),
            "--prompt", "a dog", "--prompt", "a cat", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    with np.load(out / "chelsea.npz") as z:
        assert str(z["kind"]) == "clip" and list(z["class_names"]) == ["a dog", "a cat"]
        assert z["probe_attention"].shape == (4, 16)
        np.testing.assert_allclose(z["probe_attention"].sum(-1), 1.0, rtol=1e-5)
        assert z["text_embeddings"].shape == (2, 32) and np.isfinite(z["relevance"]).all()


def test_a_siglip_folder_with_only_spiece_model_says_so(siglip_folder, tmp_path) -> None:
    folder = siglip_folder[0]
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        (bare / name).write_bytes((folder / name).read_bytes())
    (bare / "spiece.model").write_bytes(b"\x0a\x00")
    loaded = load_checkpoint(bare)
    why = kind_of(loaded).apply_prompts(loaded, PROMPTS)
    assert why is not None and "tokenizer.json" in why and "\n" not in why


def test_a_siglip_vision_model_opens_as_an_image_tower_alone(tmp_path, photo_files) -> None:
    """SiglipVisionModel (transformers 5 saves it without vision_model.): its attention and the
    probe's pooled output equal the library's; prompts are refused with the reason."""
    from transformers import SiglipVisionConfig, SiglipVisionModel

    torch.manual_seed(7)
    config = SiglipVisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, image_size=32, patch_size=8,
                                attn_implementation="eager")  # fmt: skip
    model = SiglipVisionModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or "probe" in name:
                p.normal_(0.0, 0.3)
    model.save_pretrained(tmp_path / "vision")
    loaded = load_checkpoint(tmp_path / "vision")
    assert kind_of(loaded).name == "clip"
    why = kind_of(loaded).apply_prompts(loaded, ["a dog"])
    assert why is not None and "text tower" in why
    a = analyze(loaded, photo_files["chelsea"])
    with torch.no_grad():
        out = model(pixel_values=a.input[None], output_attentions=True)
        ours = loaded.model.image_embedding(a.input[None])[0]
    pooled = out.pooler_output[0]
    torch.testing.assert_close(ours, pooled / pooled.norm(), rtol=1e-4, atol=1e-5)
    for layer, attn in enumerate(out.attentions):
        torch.testing.assert_close(a.attention[layer], attn[0], rtol=0, atol=1e-5)


def test_faithfulness_reads_each_prompts_own_sigmoid(siglip_folder, photo_files) -> None:
    """Deletion starts from the whole image: p_0 is the chosen prompt's sigmoid (the kind's
    ``probabilities``), not a softmax over the prompts; the chosen prompt, not the top one."""
    from vitviz.explain.faithfulness import evaluate_methods

    folder, _, _ = siglip_folder
    loaded = load_checkpoint(folder)
    kind_of(loaded).apply_prompts(loaded, PROMPTS)
    a = analyze(loaded, photo_files["coffee"], gradients=True)
    for target in (a.top_class, (a.top_class + 1) % len(PROMPTS)):
        result = evaluate_methods(a, ["rollout"], steps=4, target_class=target)
        assert result.target_class == target
        p0 = result.methods["rollout"].deletion[0]
        assert p0 == pytest.approx(float(torch.sigmoid(a.logits[target])), rel=1e-4)
        assert p0 != pytest.approx(float(a.logits.softmax(-1)[target]), rel=1e-3)


def test_rescore_keeps_the_probe_row_and_scores_with_sigmoids(siglip_folder, photo_files):
    folder, _, _ = siglip_folder
    loaded = load_checkpoint(folder)
    kind = kind_of(loaded)
    kind.apply_prompts(loaded, PROMPTS)
    a = analyze(loaded, photo_files["chelsea"])
    kind.apply_prompts(loaded, PROMPTS[::-1])
    b = kind.rescore(a, loaded)
    fresh = analyze(loaded, photo_files["chelsea"])
    torch.testing.assert_close(b.logits, fresh.logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b.probs, torch.sigmoid(fresh.logits), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(b.probe_attention, a.probe_attention)


def test_a_new_prompts_maps_are_one_backward_pass_through_the_kept_graph(
    siglip_folder, photo_files, monkeypatch
) -> None:
    """The probe's row comes from the analysis's own forward pass (no second tower pass), and
    after new prompts are scored a new prompt's probe-started maps (relevance, gradient
    rollout) and Grad-SAM run no tower pass and equal an analysis made from scratch."""
    from vitviz.explain.methods import get_method
    from vitviz.kinds.vit.analysis import analyze_vit

    folder, _, _ = siglip_folder
    loaded = load_checkpoint(folder)
    kind, model = kind_of(loaded), loaded.model
    kind.apply_prompts(loaded, PROMPTS)
    runs: list[int] = []
    original = model.forward_features
    counted = lambda *a, **k: runs.append(1) or original(*a, **k)  # noqa: E731
    monkeypatch.setattr(model, "forward_features", counted)
    a = analyze(loaded, photo_files["coffee"])
    assert len(runs) == 1 and a.graph is not None  # the capture pass gave the probe's row too
    assert kind.apply_prompts(loaded, [*PROMPTS, "a tree in the snow"]) is None
    b = kind.rescore(a, loaded)
    names = ("relevance", "gradient-rollout", "grad-sam")
    maps = {m: get_method(m)(b, None, 3, {}) for m in names}
    assert len(runs) == 1 and all(p.grad is None for p in model.parameters())
    monkeypatch.undo()
    fresh = analyze_vit(loaded, photo_files["coffee"], gradients=True)  # no graph kept
    assert fresh.graph is None  # its probe row: one more tower pass (a batch's way)
    torch.testing.assert_close(b.probe_attention, fresh.probe_attention, rtol=0, atol=1e-6)
    for m in names:
        torch.testing.assert_close(maps[m], get_method(m)(fresh, None, 3, {}), rtol=1e-5,
                                   atol=1e-6)  # fmt: skip
