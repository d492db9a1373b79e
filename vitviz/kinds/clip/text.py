"""A CLIP text tower (pure torch): prompt token ids -> one embedding per prompt.

Token and position embeddings; pre-norm blocks of causal multi-head attention and an MLP; a
final LayerNorm; the hidden state at each prompt's end token, projected (no bias). It computes
what Hugging Face's ``CLIPTextModel`` + ``text_projection`` (``get_text_features``) compute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.layers import make_activation

# Hugging Face's activation names -> vitviz's (vitviz.blocks.layers.make_activation)
HF_ACTIVATIONS = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh"}


@dataclass(frozen=True)
class TextConfig:
    """The text tower's shape. ``end_id`` is the end-of-text token; ``pool_argmax``: the
    pooled position is each row's largest id (old CLIP configs, whose ``eos_token_id`` was 2),
    else the first ``end_id``."""

    vocab_size: int
    width: int
    depth: int
    heads: int
    mlp_hidden: int
    context_length: int
    embed_dim: int  # the projection's output: the shared image-text space
    end_id: int
    pool_argmax: bool = False
    activation: str = "quick_gelu"  # a vitviz.blocks.layers.make_activation name
    eps: float = 1e-5
    causal: bool = True  # False: every token sees every token (SigLIP's text tower)


class TextBlock(nn.Module):
    """x + attn(ln1(x)) (causal unless the config says not), then x + mlp(ln2(x)); x (B, T, D)."""

    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        d = cfg.width
        self.heads = cfg.heads
        self.causal = cfg.causal
        self.norm1 = nn.LayerNorm(d, eps=cfg.eps)
        self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))
        self.norm2 = nn.LayerNorm(d, eps=cfg.eps)
        self.fc1, self.fc2 = nn.Linear(d, cfg.mlp_hidden), nn.Linear(cfg.mlp_hidden, d)
        self.act = make_activation(cfg.activation)

    def forward(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        h = self.norm1(x)
        q, k, v = (
            f(h).view(B, T, self.heads, D // self.heads).transpose(1, 2)
            for f in (self.q, self.k, self.v)
        )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.out(a.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class TextTower(nn.Module):
    """Token ids (B, T) -> text embeddings (B, embed_dim), not normalised."""

    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.config = cfg
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.width)
        self.position_embedding = nn.Parameter(torch.zeros(cfg.context_length, cfg.width))
        self.blocks = nn.ModuleList(TextBlock(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.projection = nn.Linear(cfg.width, cfg.embed_dim, bias=False)

    def pooled_positions(self, ids: Tensor) -> Tensor:
        """(B,) the position each row's embedding is read at."""
        if self.config.pool_argmax:
            return ids.argmax(dim=-1)
        return (ids == self.config.end_id).int().argmax(dim=-1)

    def forward(self, ids: Tensor) -> Tensor:
        B, T = ids.shape
        if self.config.context_length < T:
            raise ValueError(f"{T} tokens: this text tower reads {self.config.context_length}")
        x = self.token_embedding(ids) + self.position_embedding[:T]
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        pooled = x[torch.arange(B, device=x.device), self.pooled_positions(ids)]
        return self.projection(pooled)


def pad_prompts(encoded: list[list[int]], pad_id: int) -> Tensor:
    """Prompts' ids -> (B, T) padded at the end with ``pad_id`` (after each end token, where a
    causal tower never looks from the end token)."""
    if not encoded:
        raise ValueError("no prompts")
    width = max(len(ids) for ids in encoded)
    return torch.tensor([ids + [pad_id] * (width - len(ids)) for ids in encoded])


# -- Hugging Face CLIPModel / CLIPTextModelWithProjection -----------------------------------

_HF_BLOCK = {
    "layer_norm1": "norm1",
    "self_attn.q_proj": "q",
    "self_attn.k_proj": "k",
    "self_attn.v_proj": "v",
    "self_attn.out_proj": "out",
    "layer_norm2": "norm2",
    "mlp.fc1": "fc1",
    "mlp.fc2": "fc2",
}


def hf_text_config(text_config: Mapping[str, object], projection_dim: int) -> TextConfig:
    """TextConfig from a Hugging Face ``text_config`` (CLIPTextConfig as a dict)."""

    def get(name: str, default: object) -> object:
        value = text_config.get(name, default)
        return default if value is None else value

    width = int(get("hidden_size", 512))
    end_id = int(get("eos_token_id", 49407))
    hf_activation = str(get("hidden_act", "quick_gelu"))
    if hf_activation not in HF_ACTIVATIONS:
        raise ValueError(f"text tower activation {hf_activation!r} is not one vitviz computes")
    activation = HF_ACTIVATIONS[hf_activation]
    return TextConfig(
        vocab_size=int(get("vocab_size", 49408)),
        width=width,
        depth=int(get("num_hidden_layers", 12)),
        heads=int(get("num_attention_heads", 8)),
        mlp_hidden=int(get("intermediate_size", 2048)),
        context_length=int(get("max_position_embeddings", 77)),
        embed_dim=int(projection_dim),
        end_id=end_id,
        pool_argmax=end_id == 2,
        activation=activation,
        eps=float(get("layer_norm_eps", 1e-5)),
    )


def hf_text_state(state: Mapping[str, Tensor], depth: int) -> dict[str, Tensor]:
    """A Hugging Face CLIP state dict's text tower (``text_model.*`` + ``text_projection``)
    under TextTower's names. KeyError naming the first key missing."""
    out = {
        "token_embedding.weight": state["text_model.embeddings.token_embedding.weight"],
        "position_embedding": state["text_model.embeddings.position_embedding.weight"],
        "norm.weight": state["text_model.final_layer_norm.weight"],
        "norm.bias": state["text_model.final_layer_norm.bias"],
        "projection.weight": state["text_projection.weight"],
    }
    for i in range(depth):
        for theirs, ours in _HF_BLOCK.items():
            for p in ("weight", "bias"):
                out[f"blocks.{i}.{ours}.{p}"] = state[f"text_model.encoder.layers.{i}.{theirs}.{p}"]
    return out
