"""Sapiens2's original (Meta) tensor names, read as timm's ``Eva`` names.

Meta's Sapiens2 checkpoints name the parts timm calls ``patch_embed.proj``, ``reg_token``,
``attn.q_proj``/``k_proj``/``v_proj``, ``gamma_1`` (LayerScale, attention branch only),
``mlp.fc1`` (GluMlp's packed gate and value) / ``mlp.fc2``, ``norm1``/``norm2`` and the final
``norm``: ``patch_embed.projection``, ``storage_tokens``, ``attn.wq``/``wk``/``wv``,
``attn.gamma.weight``, ``ffn.w12``/``ffn.w3``, ``ln1``/``ln2`` and the top-level ``ln1``.
``mask_token`` (pretraining only) and the rotary periods (computed, not read) are dropped, as
timm's own loading drops them. The names are timm's to the letter, so the timm family's reading
and its library check (timm's ``checkpoint_filter_fn`` on the same file) apply unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MARKERS = ("blocks.0.attn.wq.weight", "blocks.0.ffn.w12.weight")
_BLOCK_PARTS = (  # inside a block: Meta's name -> timm's
    (".attn.wq.", ".attn.q_proj."),
    (".attn.wk.", ".attn.k_proj."),
    (".attn.wv.", ".attn.v_proj."),
    (".attn.gamma.weight", ".gamma_1"),
    (".ffn.w12.", ".mlp.fc1."),
    (".ffn.w3.", ".mlp.fc2."),
    (".ln1.", ".norm1."),
    (".ln2.", ".norm2."),
)
_TOP = (
    ("storage_tokens", "reg_token"),
    ("patch_embed.projection.", "patch_embed.proj."),
    ("ln1.", "norm."),
)


def has_meta_names(state: Mapping[str, Any]) -> bool:
    """Whether ``state`` carries Sapiens2's original names (its first block's wq and w12)."""
    return all(k in state for k in MARKERS)


def timm_name(key: str) -> str | None:
    """timm's name for a Meta Sapiens2 tensor ``key``; None for one timm's loading drops."""
    if key == "mask_token" or ("rope" in key and key != "rope.freqs"):
        return None
    if key.startswith("blocks."):
        for meta, timm in _BLOCK_PARTS:
            key = key.replace(meta, timm)
        return key
    for meta, timm in _TOP:
        if key.startswith(meta):
            return timm + key[len(meta) :]
    return key


def rename_meta(state: dict[str, Any]) -> list[str]:
    """Rename ``state``'s Meta Sapiens2 tensors to timm's in place (dropping what timm's
    loading drops); returns the dropped names. ValueError when two names become one."""
    out: dict[str, Any] = {}
    came_from: dict[str, str] = {}
    dropped = []
    for key, value in state.items():
        new = timm_name(key)
        if new is None:
            dropped.append(key)
            continue
        if new in out:
            raise ValueError(f"both {came_from[new]} and {key} are timm's {new}")
        out[new], came_from[new] = value, key
    state.clear()
    state.update(out)
    return dropped
