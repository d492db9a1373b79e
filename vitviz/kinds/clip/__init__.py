"""The CLIP kind: an image tower whose classes are prompts the user types.

A SigLIP (``siglip.SiglipImageModel``) is a model of this kind too: a ViT without a CLS token
whose head pools with a probe token (its attention is the maps' start row, the ViT kind's
``ProbeAnalysis``)
and scores each prompt with its own sigmoid; what differs is asked of the model
(``probabilities``, ``family_label``), so one kind serves both.

The image tower is a ViT (``network.ClipImageModel``), so every member that reads the forward
pass, the token grid or a method's math is the ViT kind's; this kind adds what differs: its
checkpoint families, prompts (``set_prompts``: the text tower's embeddings become the head's
rows), the image and text embeddings in the npz, and its words in the window and the CLI.
``KIND`` is what ``vitviz.kinds`` registers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kinds.token_layout import TokenLayoutKind

if TYPE_CHECKING:  # torch-free at import: the registry is read before torch loads
    import numpy as np
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
    from vitviz.kindapi.protocol import ImageInput, ImageNumbers, Loaded, ModelShape, Session
    from vitviz.kinds.clip.network import ClipConfig
    from vitviz.kinds.clip.siglip import SiglipConfig
    from vitviz.kinds.vit.analysis import Analysis


class ClipKind(TokenLayoutKind):
    """A CLIP image tower (``model_kind`` "clip"); the token-layout base's members where a
    ViT's hold."""

    name = "clip"
    label = "CLIP image tower"

    def architecture(self, model: nn.Module) -> str:
        text = "no text tower" if model.text is None else f"{len(model.prompts)} prompts"
        return f"{super().architecture(model)}, embedding {model.clip_config.embed_dim}, {text}"

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.blocks.parts import vit_parts

        own = [p for p in vit_parts(model.config) if not p.startswith("head reads")]
        if getattr(model, "pool", None) is not None:  # a SigLIP
            own += ["an attention-pooling probe over the patches",
                    "prompt head: exp(scale)·cos + bias, each prompt its own sigmoid"]  # fmt: skip
        else:
            own += ["prompt head: the CLS token projected, exp(scale)·cos with each prompt"]
        if model.text is None:
            own.append("no text tower")
        return tuple(own)

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.clip import huggingface, openclip, siglip_huggingface

        return (huggingface.FAMILY, siglip_huggingface.FAMILY, openclip.FAMILY)

    # -- loading ---------------------------------------------------------------------------------
    def config_from_dict(self, data: dict[str, object]) -> ClipConfig | SiglipConfig:
        from vitviz.kinds.clip.network import ClipConfig
        from vitviz.kinds.clip.siglip import SiglipConfig

        return SiglipConfig.from_dict(data) if data.get("siglip") else ClipConfig.from_dict(data)

    def build_from_state(
        self, config: ClipConfig | SiglipConfig, state: Mapping[str, Tensor]
    ) -> nn.Module:
        from vitviz.checkpoints.errors import CheckpointError
        from vitviz.kinds.clip.network import ClipImageModel
        from vitviz.kinds.clip.siglip import SiglipConfig, SiglipImageModel
        from vitviz.kinds.clip.siglip_tokenizer import UnigramTokenizer
        from vitviz.kinds.clip.tokenizer import ClipTokenizer, TokenizerError

        siglip = isinstance(config, SiglipConfig)
        model = SiglipImageModel(config) if siglip else ClipImageModel(config)
        missing, unexpected = model.load_state_dict(dict(state), strict=False)
        if missing or unexpected:
            raise CheckpointError(
                f"the CLIP weights do not fit: missing {sorted(missing)[:3]}, "
                f"unexpected {sorted(unexpected)[:3]}"
            )
        if config.text is not None and config.tokenizer is not None:
            try:
                model.tokenizer = (
                    UnigramTokenizer.from_folder(config.tokenizer)
                    if siglip
                    else ClipTokenizer.from_path(config.tokenizer, config.text.context_length)
                )
            except (TokenizerError, OSError) as exc:  # prompts are refused with the reason
                model.tokenizer_missing = f"its tokenizer can't be read: {exc}"
                model.tokenizer_problem = str(exc) if siglip else None
        return model.eval()

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> Analysis:
        """The ViT's analysis, keeping its forward pass's autograd graph (one image's, while it
        fits: ``vitviz.kinds.vit.kept_graph``), so a new prompt's gradient maps are one backward
        pass from its score, never the image tower again."""
        from vitviz.kinds.vit.analysis import analyze_vit

        return analyze_vit(loaded, image, keep_graph=True, **options)

    def finish_analysis(self, analysis: Analysis) -> Analysis:
        """A CLIP's as made; a SigLIP's adds its probe's attention (the maps' start row, as any
        ViT with an attention pool: the ViT kind's) and scores each prompt with its own sigmoid.
        One image's pass keeps its image embedding (``rescore``: new prompts score it without
        the image tower)."""
        if analysis.loaded is None:
            return analysis
        model = analysis.loaded.model
        embedding = getattr(model.head, "last_embedding", None)
        analysis = super().finish_analysis(analysis)
        if analysis.has_head:
            analysis.probs = self.probabilities(model, analysis.logits[None])[0]
        if embedding is not None and embedding.shape[0] == 1:  # one image's pass (the window's)
            analysis.image_embedding = embedding[0]
        return analysis

    def rescore(self, analysis: Analysis, loaded: Loaded) -> Analysis | None:
        """New prompts scored on the kept image embedding: logits, probabilities and names
        anew, the attention (and the probe's row) and the kept graph unchanged (a new prompt's
        gradients are one backward pass through it); gradients of old prompts gone."""
        from dataclasses import fields, replace

        import torch

        embedding = getattr(analysis, "image_embedding", None)
        model = loaded.model
        if embedding is None or not model.prompts:
            return None
        with torch.no_grad():
            logits = model.head.score(embedding[None].to(model.head.text.device))
        logits = logits.float().cpu()
        cleared = {f.name: {} for f in fields(analysis) if f.name.startswith("_")}
        out = replace(
            analysis,
            logits=logits[0],
            probs=self.probabilities(model, logits)[0],
            class_names=list(loaded.class_names),
            **cleared,
        )
        out.image_embedding = embedding
        return out

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Sequence[Tensor]]:
        out = model.forward_explained(x, capture_attention=True)
        return model.image_embedding(x), out.attentions

    def intermediates(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        replace: HeadReplacement | None = None,
        logits_only: bool = False,
    ) -> Intermediates:
        """The ViT's accessor on its own blocks (``vitviz.kinds.clip.intermediates``)."""
        from vitviz.kinds.clip.intermediates import clip_intermediates

        return clip_intermediates(model, x, replace=replace, logits_only=logits_only)

    def probabilities(self, model: nn.Module, logits: Tensor) -> Tensor:
        """A CLIP's softmax over the prompts; a SigLIP's: each prompt's own sigmoid."""
        sigmoid = getattr(model.config, "outputs", "logits") == "sigmoid"
        return logits.sigmoid() if sigmoid else logits.softmax(dim=-1)

    # -- prompts ---------------------------------------------------------------------------------
    def apply_prompts(self, loaded: Loaded, prompts: Sequence[str]) -> str | None:
        """The prompts become the classes (``loaded.class_names`` too); why not, or None."""
        model = loaded.model
        if model.text is None:
            return "this CLIP checkpoint has no text tower (an image tower alone)"
        if model.tokenizer is None and getattr(model, "tokenizer_problem", None):
            return model.tokenizer_problem
        if model.tokenizer is None:
            return model.tokenizer_missing
        try:
            model.set_prompts(prompts)
        except ValueError as exc:
            return str(exc)
        loaded.class_names = list(prompts)
        return None

    # -- export and window -------------------------------------------------------------------
    def npz_arrays(self, analysis: Analysis) -> dict[str, np.ndarray]:
        import torch

        model = analysis.loaded.model
        p = next(model.parameters())
        with torch.no_grad():
            image = model.image_embedding(analysis.input[None].to(p.device, p.dtype))[0]
        out = {
            **super().npz_arrays(analysis),
            "image_embedding": image.float().cpu().numpy(),
            "text_embeddings": model.head.text.float().cpu().numpy(),
        }
        probe = getattr(analysis, "probe_attention", None)
        if probe is not None:  # a SigLIP's: the maps' start row, (H, N) over the patches
            out["probe_attention"] = probe.float().cpu().numpy()
        return out

    def model_shape(self, loaded: Loaded) -> ModelShape:
        from dataclasses import replace

        shape = super().model_shape(loaded)
        prompts = tuple(loaded.model.prompts)
        family = getattr(loaded.model, "family_label", "CLIP")
        headline = f"{shape.headline} · {family}, {len(prompts)} prompts"
        reads = loaded.model.text is not None  # an image tower alone takes none (no box)
        return replace(shape, headline=headline, takes_prompts=reads, prompts=prompts)

    def image_numbers(self, session: Session) -> ImageNumbers:
        """The ViT's, worded for prompts: the chart's bars are prompts, their probabilities the
        softmax over the prompts of exp(logit_scale) · cos (a SigLIP: each prompt's sigmoid;
        its query without a click is its probe token, as the ViT kind words it)."""
        from dataclasses import replace

        numbers = super().image_numbers(session)
        sigmoid = getattr(session.loaded.model.config, "outputs", "logits") == "sigmoid"
        said = "each prompt's own sigmoid" if sigmoid else "softmax over the prompts"
        words = replace(numbers.words, probability=said, class_noun="prompt")
        return replace(numbers, words=words)


KIND = ClipKind()
