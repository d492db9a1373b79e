"""The analysis of a ViT whose head pools with an attention probe (MAP): its row starts the maps.

A model whose head is an attention pool (``vitviz.blocks.attention_pool``: SigLIP's image tower,
timm's ``global_pool='map'`` ViTs) has no CLS token the head reads: a learnt probe attends to the
final tokens. Where a ViT's maps read the CLS token's row (the query None), these start from the
probe's attention over the tokens, A_p (H, N) (zero on prefix tokens the pool doesn't read), and
(for a target class c) its gradient G_p = ∂logits[c]/∂A_p:

- raw attention at the last layer: A_p per head (mean over heads for the head -1); the earlier
  layers, where no probe exists, show the query None of the ViT (the mean of the patch queries'
  rows without prefix tokens);
- rollout: s = fuse_h(A_p) (the rollout's own head fusion), map = s · Ã_L ⋯ Ã_s;
- gradient rollout: s = (mean_h(A_p ⊙ G_p))⁺, map = s · Ã_L ⋯ Ã_s with the gradient's Ã_l;
- relevance: s = mean_h((G_p ⊙ A_p)⁺), map = s · (I + Ā_L) ⋯ (I + Ā_s).

A pool with other heads than the layers (timm's PE core: 8 probe heads) can't fill the layers'
per-head slots with its own heads: the last layer's raw map then shows the probe's mean over its
heads in every head slot (the mean map is exact), and a rollout from a chosen subset of heads is
refused (the subset names the layers' heads, not the probe's).

Each is the definition applied to one more attention step, the probe's (whose row has no
identity term towards the tokens: the probe is not one of them), so the scaled maps are
exactly the probe row of the rollout taken over [probe, tokens]. A clicked patch is a query
as in any ViT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import torch
from torch import Tensor

from vitviz import explain
from vitviz.explain.tokens import min_max_scale, patch_part, scale_to_max
from vitviz.kinds.vit.analysis import Analysis
from vitviz.kinds.vit.kept_graph import frozen_parameters


@dataclass
class ProbeAnalysis(Analysis):
    """``Analysis`` + the probe's attention ``probe_attention`` (H, N) over the tokens, on the
    analysis's device."""

    probe_attention: Tensor | None = None
    _probe_gradients: dict[int, Tensor] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, analysis: Analysis) -> ProbeAnalysis:
        """``analysis`` (a ViT analysis of a model with an attention pool) with its probe row.
        The probe's attention is the pooling head's, run on the final tokens of the analysis's
        own forward pass (its kept graph's, ``Analysis.graph``); an analysis without a kept
        graph (a batch's) runs the encoder once more (fused, no capture) for them."""
        assert analysis.loaded is not None
        model = analysis.loaded.model
        with torch.no_grad():
            if analysis.graph is not None:  # the capture pass's final tokens: no encoder pass
                tokens = analysis.graph.tokens.detach()
            else:
                p = next(model.parameters())
                x = analysis.input[None].to(p.device, p.dtype)
                tokens, _, _, _ = model.forward_features(x)
            _, probe = model.probe_attention(tokens)
        values = {f.name: getattr(analysis, f.name) for f in fields(Analysis)}
        return cls(**values, probe_attention=probe[0].float())

    # -- the probe row --------------------------------------------------------------------
    @property
    def _last_layer_kept(self) -> bool:
        return self.layer_indices[-1] == self.model_layers - 1

    def _probe(self) -> Tensor:
        assert self.probe_attention is not None
        return self.probe_attention.float()

    @property
    def probe_heads_differ(self) -> bool:
        """The pool has another head count than the layers (its heads don't fit their slots)."""
        return self._probe().shape[0] != self.num_heads

    def _probe_rows(self) -> Tensor:
        """The probe's row in the layers' head slots (H, N): its own heads, or (a pool with
        other heads) its mean over them in every slot."""
        probe = self._probe()
        if self.probe_heads_differ:
            return probe.mean(dim=0, keepdim=True).expand(self.num_heads, -1)
        return probe

    def probe_gradient(self, target_class: int | None = None) -> Tensor:
        """G_p = ∂logits[c]/∂A_p (H, N), cached per class: with the kept graph from the same
        backward pass as the layers' G_l (``_graph_gradients``), else from a pass through the
        head alone."""
        c = self._target(target_class)
        if c not in self._probe_gradients and self.graph is not None and c not in self._products:
            self.gradient_products(c)  # its backward pass keeps G_p too
        if c not in self._probe_gradients and self.graph is not None:  # the head alone
            model = self.loaded.model
            with torch.enable_grad(), frozen_parameters(model):
                tokens = self.graph.tokens.detach().requires_grad_(True)  # the head's own graph
                pooled, probe = model.probe_attention(tokens)
                (grad,) = torch.autograd.grad(model.head_logits(pooled)[0, c], probe)
            self._probe_gradients[c] = grad[0].float()
        if c not in self._probe_gradients:
            model, x = self._model_and_input()
            _, grad = model.probe_gradient(x, c)
            self._probe_gradients[c] = grad.float()
        return self._probe_gradients[c]

    def _graph_gradients(self, c: int) -> list[Tensor]:
        """The layers' G_l of y_c (as ``Analysis``) from the kept graph, and (kept for
        ``probe_gradient``) the probe's G_p: the pooling head and the prompt head run again on
        the kept final tokens, then one backward pass for both."""
        assert self.graph is not None and self.loaded is not None
        model = self.loaded.model
        with torch.enable_grad(), frozen_parameters(model):
            pooled, probe = model.probe_attention(self.graph.tokens)
            y = model.head_logits(pooled)[0, c]
            *grads, g_probe = self.graph.gradients(y, self.layer_indices, [probe])
        self._probe_gradients[c] = g_probe[0].float()
        return grads

    def _query_rows(self, patch: tuple[int, int] | None) -> Tensor:
        rows = super()._query_rows(patch)
        if patch is None and self._last_layer_kept:
            rows = rows.clone()
            rows[-1] = self._probe_rows()
        return rows

    def attention_maps(self, layer: int, patch: tuple[int, int] | None = None) -> Tensor:
        row = self.layer_row(layer) % self.num_layers  # -1: the last kept
        if patch is None and row == self.num_layers - 1 and self._last_layer_kept:
            return patch_part(self._probe_rows(), self.grid, self.num_prefix_tokens).cpu()
        return super().attention_maps(layer, patch)

    # -- maps that start from the probe row ---------------------------------------------------
    def _chain(self, prepared: explain.PreparedRollout, s: Tensor, start_layer: int) -> Tensor:
        """s · Ã_L ⋯ Ã_s for a start row s (N,), scaled to max 1: (gh, gw)."""
        r = prepared.chain(s[None].to(prepared.normalized.dtype), start_layer)
        return scale_to_max(patch_part(r, self.grid, self.num_prefix_tokens))[0].cpu()

    def rollout(
        self,
        patch: tuple[int, int] | None = None,
        fusion: str = "mean",
        heads: Sequence[int] | None = None,
        discard_ratio: float = 0.0,
        start_layer: int = 0,
    ) -> Tensor:
        if patch is not None:
            return super().rollout(patch, fusion, heads, discard_ratio, start_layer)
        self.require_every_layer("attention rollout")
        if heads is not None and self.probe_heads_differ:
            raise ValueError(
                f"the attention pool's probe has {self._probe().shape[0]} heads, the layers "
                f"{self.num_heads}: a subset of the layers' heads can't start the rollout from it"
            )
        prepared = self._rollout_prepared(fusion, heads, discard_ratio)
        s = explain.fuse_heads(self._probe()[None, :, None, :], fusion, heads)[0, 0]  # (N,)
        return self._chain(prepared, s, start_layer)

    def gradient_rollout(
        self,
        target_class: int | None = None,
        patch: tuple[int, int] | None = None,
        discard_ratio: float = 0.0,
        start_layer: int = 0,
    ) -> Tensor:
        if patch is not None:
            return super().gradient_rollout(target_class, patch, discard_ratio, start_layer)
        self.require_every_layer("gradient rollout")
        c = self._target(target_class)
        prepared = self._gradient_rollout_prepared(c, discard_ratio)
        s = (self._probe() * self.probe_gradient(c)).mean(dim=0).clamp_min(0)
        return self._chain(prepared, s, start_layer)

    def relevance(
        self,
        target_class: int | None = None,
        patch: tuple[int, int] | None = None,
        start_layer: int = 0,
    ) -> Tensor:
        if patch is not None:
            return super().relevance(target_class, patch, start_layer)
        self.require_every_layer("relevance")
        c = self._target(target_class)
        a_bar = self.gradient_products(c).positive  # (L, 1, N, N)
        if not 0 <= start_layer < a_bar.shape[0]:
            raise ValueError(f"start layer {start_layer} out of range for {a_bar.shape[0]} layers")
        r = (self.probe_gradient(c) * self._probe()).clamp_min(0).mean(dim=0)[None]
        r = r.to(a_bar.dtype)
        for layer in range(a_bar.shape[0] - 1, start_layer - 1, -1):
            r = r + torch.bmm(r[:, None, :], a_bar[layer])[:, 0]
        return min_max_scale(patch_part(r, self.grid, self.num_prefix_tokens))[0].cpu()
