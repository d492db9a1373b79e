"""``StagedKind``: what the kinds whose stages each have their own token grid share (Swin, the
pyramid ViTs, PiT, LeViT, MViTv2, MobileViT, TNT, CrossViT, VOLO; DESIGN §3): blocks named
"stage.block", heads that differ from stage to stage, each layer on its stage's grid (prefix
tokens where a kind's layers carry them), one image at a time, the window's numbers
through ``TableKind`` with thumbnails at the finest stage grid that fits, and the engine's query
maps and methods from the kind's ``engine_data`` module (imported when first called, so a kind
package stays torch-free when the registry reads it).

A kind on it names the members of its own modules (``CONFIG``, ``NETWORK``, ``INTERMEDIATES``,
...: "module:name", imported when first called; ``DeclaredModules``) and ``StagedKind`` forwards
to them; a kind overrides a member where its own differs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from vitviz.kinds.declared import DeclaredModules, imported
from vitviz.kinds.table_kind import TableKind

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

    from vitviz.kindapi.feature_sites import LayerChoice
    from vitviz.kindapi.protocol import (
        FaithfulnessReport,
        ImageInput,
        LayerRow,
        Loaded,
        ModelShape,
        QueryMaps,
        Session,
        TokenGeometry,
        ViewWords,
    )


def overlay_stretched(analysis: Any, values: np.ndarray, colormap: str, opacity: float) -> Any:
    """``values`` (h, w), a map on any grid of the model, over the model input (H, W): each
    cell over its share of the input from the top left (pixel row y reads cell row y·h // H)."""
    import numpy as np

    from vitviz.imaging.overlay import overlay_on_image

    values = np.asarray(values, dtype=np.float32)
    H, W = (int(v) for v in analysis.input.shape[-2:])
    h, w = values.shape
    rows = np.minimum(np.arange(H) * h // H, h - 1)
    cols = np.minimum(np.arange(W) * w // W, w - 1)
    return overlay_on_image(
        analysis.pixels, values[rows][:, cols], colormap=colormap, opacity=opacity
    )


class StagedKind(DeclaredModules, TableKind):
    """``ENGINE_DATA`` names the kind's module (``query_maps``, ``words``); ``OWNER`` how its
    messages name one ("a Swin"); ``HEAD_AXIS`` the heads' axis of its kept attention. The
    "module:name" references below are its own modules' members the loading, analysing and
    presenting members forward to."""

    ENGINE_DATA: str
    HEAD_AXIS = 0
    POOL_QUERY = "query: average pool"  # the words of the query without a clicked cell
    POOL_WORDS = "average pool (every token)"  # … in the side panel's Query row
    POOL_SOURCE = "the average pool"  # where the methods start without one

    PARTS: str  # ``parts(config)``: the words of its parts
    ANALYZE: str  # ``analyze(loaded, image, gradients, target_class)``
    ATTENTION_GRADIENTS = True  # whether ``ANALYZE`` takes ∂y_c/∂A when the options ask
    SITES: str  # its ``StagedSites`` class: ``SITES(model)`` of a ``NETWORK``
    TOKENS_ON_GRID: str  # ``tokens_on_grid(model, x, layer)``
    HEAD_STATISTICS: str  # ``head_statistics(analysis)``
    NPZ_ARRAYS: str  # ``arrays(analysis)``: the npz's arrays

    def _engine(self) -> ModuleType:
        return importlib.import_module(self.ENGINE_DATA)

    # -- identity and loading ------------------------------------------------------------------
    def parts(self, model: nn.Module) -> tuple[str, ...]:
        return imported(self.PARTS)(model.config)

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Any]:
        """The logits and every attention layer's probabilities, (B, heads, ...) in the order
        and layout its library's layers compute them."""
        out = model.forward_explained(x)
        return out.logits, out.attentions

    # -- analysing and methods -----------------------------------------------------------------
    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> Any:
        """``ANALYZE``'s analysis of ``image`` with its blocks' outputs kept; the attention
        gradients where ``gradients`` asks, the kind takes them and the model has a head."""
        asked = bool(options.get("gradients"))
        gradients = self.ATTENTION_GRADIENTS and asked and self.has_head(loaded)
        target = options.get("target_class")
        analyze = imported(self.ANALYZE)
        return self.keeping_blocks(loaded, lambda: analyze(loaded, image, gradients, target))

    def parameter_bounds(self, subject: Any) -> tuple[int, int]:
        """A model's blocks and most heads of a stage; an analysis's kept blocks and heads."""
        from torch import nn

        if isinstance(subject, nn.Module):
            return int(subject.config.depth), max(int(h) for h in self.model_heads(subject.config))
        attentions = subject.attentions
        return len(attentions), max(int(a.shape[self.HEAD_AXIS]) for a in attentions)

    def model_heads(self, config: Any) -> Sequence[int]:
        """The heads of each stage of a model's ``config`` (a kind whose layers differ within
        a stage: of each layer)."""
        return config.heads

    def unused_options(self) -> Mapping[str, str]:
        """The ViT's ``analyze`` options its analysis does not use, and why."""
        noun = self.OWNER
        return {
            "layers": f"applies to ViT models; {noun}'s analysis keeps every block",
            "batch_size": f"is not used on {noun}: its images are analysed one at a time",
            "attention_dtype": f"is not used on {noun}: its attention is kept as the model "
            "computes it",
            "max_side": f"is not used on {noun}: its map PNGs are drawn over the model input",
        }

    # -- the block outputs of the analysis's own pass (DESIGN §5) -------------------------------
    def staged_sites(self, model: nn.Module, x: Any) -> Any:
        """The accessor's ``StagedSites`` of ``model`` for the input x (1, C, H, W):
        ``SITES(model)`` of vitviz's own ``NETWORK``, None for a network the accessor can't
        take apart."""
        return imported(self.SITES)(model) if isinstance(model, imported(self.NETWORK)) else None

    def own_network(self, model: nn.Module) -> Any:
        """``model``, vitviz's own ``NETWORK``; ValueError in one line for another network
        (vitviz can't take it apart into its blocks)."""
        if not isinstance(model, imported(self.NETWORK)):
            raise ValueError(f"vitviz can't take a {type(model).__name__} apart into its blocks")
        return model

    def keeping_blocks(self, loaded: Any, run: Callable[[], Any]) -> Any:
        """``run()``'s analysis (one forward pass of ``loaded``'s model) with the block outputs
        that pass computed kept as ``kept_blocks`` (laid out as ``intermediates`` gives them),
        so the feature views need no pass of their own."""
        from vitviz.kinds.staged_intermediates import block_calls, kept_block_outputs

        model = getattr(loaded, "model", loaded)
        try:
            blocks = self.cam_blocks(model)
        except ValueError:
            return run()
        with block_calls(blocks) as calls:
            analysis = run()
        sites = self.staged_sites(model, analysis.input[None])
        if sites is not None:
            kept = kept_block_outputs(sites, calls, analysis.logits[None])
            analysis.kept_blocks = None if kept is None else self.kept_with_prefix(sites, kept)
        return analysis

    def kept_with_prefix(self, sites: Any, kept: Any) -> Any:
        """``kept`` (``kindapi.BlockOutputs``, no prefix) with the prefix tokens each block
        carried, (B, P, C) each, read from ``sites.prefixes`` after it laid the blocks out; as
        it is where they carry none (``carries_prefix``), None where a block's is missing."""
        import dataclasses

        if not self.carries_prefix(sites):
            return kept
        prefixes = tuple(p.detach() for p in sites.prefixes if p is not None)
        if len(prefixes) != len(kept.blocks):
            return None
        return dataclasses.replace(kept, block_prefix=prefixes)

    def carries_prefix(self, sites: Any) -> bool:
        """Whether the blocks ``sites`` laid out carry prefix tokens: none (the kinds with a
        CLS say so)."""
        return False

    def analysis_blocks(self, analysis: Any) -> Any:
        """The block outputs its own pass kept (``keeping_blocks``), None without them."""
        return getattr(analysis, "kept_blocks", None)

    # -- the accessor and the numbers of an analysis --------------------------------------------
    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        """``TOKENS_ON_GRID``: a block's tokens (its norms' too) -> (B, C, h, w) row-major on
        its grid, the prefix left out (DESIGN §5)."""
        return imported(self.TOKENS_ON_GRID)(model, x, layer)

    def head_statistics(self, analysis: Any) -> dict[str, np.ndarray]:
        return imported(self.HEAD_STATISTICS)(analysis)

    def npz_arrays(self, analysis: Any) -> dict[str, np.ndarray]:
        return imported(self.NPZ_ARRAYS)(analysis)

    def token_geometry(self, analysis: Any) -> TokenGeometry:
        """Each attention layer on its stage's grid (``block_stages``) with the prefix tokens
        and windows ``layer_prefix`` and ``layer_windows`` give; clicks on stage 0's grid."""
        from vitviz.kindapi.protocol import LayerGrid, TokenGeometry

        layers = tuple(
            LayerGrid(
                grid=tuple(analysis.stage_grids[s]),
                token_pixels=analysis.stage_pixels[s],
                num_prefix_tokens=self.layer_prefix(analysis, b),
                windows=self.layer_windows(analysis, b),
            )
            for b, s in enumerate(analysis.block_stages)
        )
        size = tuple(int(v) for v in analysis.input.shape[-2:])
        return TokenGeometry(
            input_size=size,
            grid=tuple(analysis.stage_grids[0]),
            cell_pixels=int(analysis.stage_pixels[0]),
            layers=layers,
        )

    def layer_prefix(self, analysis: Any, layer: int) -> int:
        """The prefix tokens before attention layer ``layer``'s grid: none."""
        return 0

    def layer_windows(self, analysis: Any, layer: int) -> np.ndarray | None:
        """(h, w) int32 window id per token of layer ``layer``, None: it attends globally."""
        return None

    # -- presenting ----------------------------------------------------------------------------
    @staticmethod
    def named_row(name: str, heads: int, tooltip: str, title: str, noun: str) -> LayerRow:
        """The head grid's row of layer ``name`` ("0.1"), hovered as "{noun} {name}"."""
        from vitviz.kindapi.protocol import LayerRow

        return LayerRow(
            name,
            heads,
            tooltip=tooltip,
            name=name,
            title=title,
            hover=f"{noun} {name}",
            selector=f" · {name}",
        )

    @staticmethod
    def block_names(block_stages: Any) -> Iterator[str]:
        """ "stage.block" of each block, stages and blocks counted from 0 ("0.0", "0.1", "1.0")."""
        counts: dict[int, int] = {}
        for stage in block_stages:
            index = counts.get(int(stage), 0)
            counts[int(stage)] = index + 1
            yield f"{stage}.{index}"

    # -- engine and window ---------------------------------------------------------------------
    def has_head(self, loaded: Loaded | nn.Module) -> bool:
        model = getattr(loaded, "model", loaded)
        return int(model.config.num_classes) > 0

    def default_class(self, session: Session) -> int:
        """The current pass's class (the top one, or the one a gradient pass was run for)."""
        return session.analysis.target_class if self.has_head(session.loaded) else -1

    def view_words(self, analysis: Any) -> ViewWords:
        """Blocks ("0.1"), points of the input, the pool; the rollouts read the last stage's
        token and span the first stage's grid, Grad-CAM the last stage's grid."""
        from vitviz.explain.methods import cam_methods
        from vitviz.kindapi.protocol import ViewWords

        h0, w0 = analysis.stage_grids[0]
        last = analysis.block_stages[-1]
        over = f"over stage 0's {h0}×{w0} tokens"
        return ViewWords(
            layer="block",
            axis="block (stage.block)",
            head="head {head} of 0–{last}",
            query_none=self.POOL_WORDS,
            query_cell="point y {y:.0f}, x {x:.0f} px",
            title_query_none=self.POOL_QUERY,
            title_query="query token ({trow}, {tcol}) of {th}×{tw}",
            method_query_none=f"from {self.POOL_SOURCE} · {over}",
            method_query=f"from stage {last}'s token ({{trow}}, {{tcol}}) · {over}",
            # the CAM family: its target layer's stage grid, brought to stage 0's
            method_fixed=dict.fromkeys(cam_methods(), f"its layer's stage grid, {over}"),
        )

    def evaluate_faithfulness(
        self,
        session: Session,
        names: Sequence[str],
        *,
        steps: int,
        mask: np.ndarray | None,
        name: str,
        params: Mapping[str, Mapping[str, Any]],
    ) -> FaithfulnessReport:
        options = {"steps": steps, "mask": mask, "name": name, "params": params}
        return self.curves(session, list(names), options)

    def curves(
        self, session: Session, names: list[str], options: dict[str, Any]
    ) -> FaithfulnessReport:
        """Deletion and insertion curves of ``names`` (``evaluate_faithfulness``'s options) on
        the session's model (an analysis made without it is given it)."""
        from dataclasses import replace

        from vitviz.explain.faithfulness import evaluate_methods
        from vitviz.kinds.staged_analysis import ModelOnly

        a, model = session.analysis, session.loaded.model
        if not self.has_head(session.loaded):
            raise ValueError("faithfulness needs a classification head, and this model has none")
        if a.loaded is None or a.loaded.model is not model:
            a = replace(a, loaded=ModelOnly(model))
        return evaluate_methods(a, names, **options)

    def model_shape(self, loaded: Loaded) -> ModelShape:
        """The engine module's ``model_shape(loaded, kind)``."""
        return self._engine().model_shape(loaded, self)

    def thumbnails(self, analysis: Any) -> tuple[tuple[int, int], int]:
        """The engine module's ``thumbnail_grid(analysis)``: (grid, cell pixels)."""
        return self._engine().thumbnail_grid(analysis)

    def query_maps(self, session: Session, query: tuple[int, int] | None) -> QueryMaps:
        return self._engine().query_maps(session, query)

    def heads_query_words(self, query: tuple[int, int] | None, analysis: Any = None) -> str:
        """A clicked cell, or the query without one as the view's title names it for this
        model (a PVT v1's last-stage CLS token, an MViTv2's CLS)."""
        if query is not None:
            return f"query cell {query}"
        return self.POOL_QUERY if analysis is None else self.view_words(analysis).title_query_none
