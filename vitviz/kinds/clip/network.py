"""A CLIP image tower as vitviz explains it: vitviz's ViT whose head scores typed prompts.

The image tower is vitviz's ``VisionTransformer`` (CLS token, ``pre_norm``, QuickGELU, the final
LayerNorm read at the CLS token). Its head is a ``PromptHead``: the CLS feature projected into
the shared image-text space, normalised, and compared with each prompt's normalised text
embedding::

    logits[p] = exp(logit_scale) · <v / |v|, t_p / |t_p|>      v = W_proj · pooled   (D -> E)

what Hugging Face's ``CLIPModel`` gives as ``logits_per_image``. Every method of the ViT then
targets y = logits[p], a prompt's score. The text tower runs once per prompt (cached by text);
changing prompts never reruns the image tower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.kinds.clip.text import TextConfig, TextTower, pad_prompts
from vitviz.kinds.clip.tokenizer import ClipTokenizer


@dataclass(frozen=True)
class ClipConfig:
    """A CLIP model: its image tower ``vit`` (num_classes: the prompts set), the shared space's
    width ``embed_dim``, the text tower (None: an image tower alone, no prompts) and where its
    tokenizer is read from (a folder of tokenizer files, or OpenAI's gzip merges file)."""

    vit: ViTConfig
    embed_dim: int
    text: TextConfig | None = None
    tokenizer: str | None = None

    # what the shared layers read of any model config (ModelConfig)
    @property
    def image_size(self) -> tuple[int, int]:
        return self.vit.image_size

    @property
    def patch_size(self) -> int:
        return self.vit.patch_size

    @property
    def in_channels(self) -> int:
        return self.vit.in_channels

    @property
    def num_classes(self) -> int:
        return self.vit.num_classes

    def to_dict(self) -> dict[str, object]:
        text = None if self.text is None else asdict(self.text)
        return {"vit": self.vit.to_dict(), "embed_dim": self.embed_dim, "text": text,
                "tokenizer": self.tokenizer}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClipConfig:
        text = data.get("text")
        return cls(
            vit=ViTConfig.from_dict(data["vit"]),
            embed_dim=int(data["embed_dim"]),
            text=None if text is None else TextConfig(**text),
            tokenizer=data.get("tokenizer"),
        )


class PromptHead(nn.Module):
    """pooled (B, D) -> (B, P) scores of P prompts: exp(logit_scale) · cos(W v, t_p)."""

    def __init__(self, dim: int, embed_dim: int) -> None:
        super().__init__()
        self.projection = nn.Linear(dim, embed_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.zeros(()))
        self.register_buffer("text", torch.zeros(0, embed_dim), persistent=False)  # (P, E) unit

    def embed(self, pooled: Tensor) -> Tensor:
        """(B, D) -> (B, E) unit image embeddings."""
        return F.normalize(self.projection(pooled), dim=-1)

    def score(self, embedding: Tensor) -> Tensor:
        """(B, E) unit image embeddings -> (B, P) the prompts' logits."""
        return self.logit_scale.exp() * embedding @ self.text.to(embedding.dtype).T

    def forward(self, pooled: Tensor) -> Tensor:
        embedding = self.embed(pooled)
        self.last_embedding = embedding.detach()  # (B, E): new prompts rescore it, no forward
        return self.score(embedding)

    def relevance(self, pooled: Tensor, r: Tensor) -> tuple[Tensor, Tensor]:
        """The head's LRP step (``vitviz.explain.attribution``): pooled (B, D) and r (B, P) the
        relevance given to each prompt (one-hot) -> R_v (B, E) at v = W_proj·pooled and W_proj
        (E, D), whose z⁺ rule goes on. With |v| held constant the logit y_p = s·(t̂_p·v)/|v| is
        linear in v; LRP-0 hands each component its contribution, R_v = Σ_p r_p·(s/|v|)·t̂_p ⊙ v
        (for the one-hot of p: sums to y_p)."""
        v = self.projection(pooled)  # (B, E)
        scale = self.logit_scale.exp() / v.norm(dim=-1, keepdim=True)  # (B, 1): s/|v|
        return scale * (r @ self.text.to(v.dtype)) * v, self.projection.weight


class ClipImageModel(VisionTransformer):
    """vitviz's ViT with a ``PromptHead``; ``text`` (a TextTower) and ``tokenizer`` turn
    prompts into the head's rows (``set_prompts``). ``config`` is the image tower's ViTConfig
    (num_classes: the prompts set), ``clip_config`` the whole model's; ``model_kind`` names the
    CLIP kind."""

    model_kind = "clip"

    def __init__(self, config: ClipConfig) -> None:
        super().__init__(replace(config.vit, num_classes=0))
        self.clip_config = config
        self.head = PromptHead(config.vit.dim, config.embed_dim)
        self.text = None if config.text is None else TextTower(config.text)
        self.tokenizer: ClipTokenizer | None = None
        self.tokenizer_missing = (  # why there is no tokenizer (what apply_prompts says)
            "no tokenizer files beside the weights (tokenizer.json, or vocab.json and "
            "merges.txt; OpenCLIP's ships with the open_clip_torch package)"
        )
        self.prompts: tuple[str, ...] = ()
        self._embedded: dict[str, Tensor] = {}  # prompt -> (E,) unit text embedding

    def text_embeddings(self, prompts: Sequence[str]) -> Tensor:
        """(P, E) unit text embeddings of ``prompts``; each text's tower pass is kept."""
        if self.text is None or self.tokenizer is None:
            raise ValueError("this checkpoint has no text tower: it takes no prompts")
        todo = [p for p in dict.fromkeys(prompts) if p not in self._embedded]
        if todo:
            ids = self.token_ids(todo)
            p0 = next(self.text.parameters())
            with torch.no_grad():
                emb = F.normalize(self.text(ids.to(p0.device)).float(), dim=-1)
            self._embedded.update(zip(todo, emb.cpu(), strict=True))
        width = self.head.text.shape[-1]
        if not prompts:
            return torch.zeros(0, width)
        return torch.stack([self._embedded[p] for p in prompts])

    def token_ids(self, prompts: Sequence[str]) -> Tensor:
        """(P, T) ids of ``prompts``, padded at the end (a causal tower never looks there)."""
        assert self.tokenizer is not None
        return pad_prompts([self.tokenizer.encode(p) for p in prompts], pad_id=0)

    def set_prompts(self, prompts: Sequence[str]) -> None:
        """Make ``prompts`` the head's classes (the image tower is not run)."""
        prompts = tuple(prompts)
        text = self.text_embeddings(prompts)
        w = self.head.logit_scale
        self.head.text = text.to(w.device, w.dtype)
        self.prompts = prompts
        self.config = replace(self.config, num_classes=len(prompts))

    def image_embedding(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, E) unit image embeddings (the CLS feature, projected)."""
        tokens, _, _, _ = self.forward_features(x)
        return self.head.embed(tokens[:, 0])
