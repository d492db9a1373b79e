"""``StagedKind``: what the kinds whose stages each have their own token grid share (Swin, the
pyramid ViTs; DESIGN §3): blocks named "stage.block", heads that differ from stage to stage, no
prefix tokens, the head pooling the last stage, one image at a time, the window's numbers
through ``TableKind`` with thumbnails at the finest stage grid that fits, and the engine's query
maps and methods from the kind's ``engine_data`` module (imported when first called, so a kind
package stays torch-free when the registry reads it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from vitviz.kinds.table_kind import TableKind

if TYPE_CHECKING:
    import numpy as np
    from torch import nn

    from vitviz.kindapi.protocol import (
        FaithfulnessReport,
        Loaded,
        ModelShape,
        QueryMaps,
        Session,
        ViewWords,
    )


class StagedKind(TableKind):
    """``ENGINE_DATA`` names the kind's module (``query_maps``, ``words``); ``OWNER`` how its
    messages name one ("a Swin"); ``HEAD_AXIS`` the heads' axis of its kept attention."""

    ENGINE_DATA: str
    HEAD_AXIS = 0
    POOL_QUERY = "query: average pool"  # the words of the query without a clicked cell
    POOL_WORDS = "average pool (every token)"  # … in the side panel's Query row
    POOL_SOURCE = "the average pool"  # where the methods start without one

    def _engine(self) -> ModuleType:
        return importlib.import_module(self.ENGINE_DATA)

    # -- analysing and methods -----------------------------------------------------------------
    def parameter_bounds(self, subject: Any) -> tuple[int, int]:
        """A model's blocks and most heads of a stage; an analysis's kept blocks and heads."""
        from torch import nn

        if isinstance(subject, nn.Module):
            return int(subject.config.depth), max(int(h) for h in subject.config.heads)
        attentions = subject.attentions
        return len(attentions), max(int(a.shape[self.HEAD_AXIS]) for a in attentions)

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
        """The accessor's ``StagedSites`` of ``model`` for the input x (1, C, H, W); None for a
        network the accessor can't take apart (the kinds override it)."""
        return None

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
        carried, read from ``sites`` after it laid the blocks out; as it is for a kind whose
        blocks carry none (the kinds with a prefix override it)."""
        return kept

    def analysis_blocks(self, analysis: Any) -> Any:
        """The block outputs its own pass kept (``keeping_blocks``), None without them."""
        return getattr(analysis, "kept_blocks", None)

    # -- presenting ----------------------------------------------------------------------------
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
