"""``KindBase``: the members of ``ModelKind`` most kinds leave as they are, written once
(DESIGN §3), from what lies beneath the contract (the imaging, the kind's own members). A kind
subclasses it, or ``vitviz.kinds.table_kind.TableKind`` (the engine's members made through the
method table and the pipeline) or a family's base (``vitviz.kinds.token_layout``,
``vitviz.kinds.staged``), and writes what is its own: identity, loading, its analysis, token
geometry, layer rows, head statistics, query maps and the npz's arrays.

Torch-free at import: every member imports what it needs when called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image
    from torch import Tensor, nn

    from vitviz.kindapi.feature_sites import CamLayers, FeatureSite, LayerChoice
    from vitviz.kindapi.intermediates import (
        BlockOutputs,
        HeadReplacement,
        Intermediates,
        Readout,
    )
    from vitviz.kindapi.protocol import (
        ImageInput,
        KindAnalysis,
        KindMethod,
        Loaded,
        ModelShape,
        Session,
        ViewWords,
    )


class KindBase:
    """Defaults of ``ModelKind``: a kind of classifier whose classes are its head's, that
    vitviz neither trains nor opens from a user's code, analysing one image at a time."""

    name: str
    label: str
    catch_all = False  # tried last among the kinds that own a model (the ViT's generic layouts)
    families: Sequence[Any] = ()
    model_code: Any = None
    training: Any = None
    METHODS_MODULE = ""  # the module whose METHODS and CANNOT declare its methods (DESIGN §5)
    OWNER = "this model"  # "a ViT": whose classes ``apply_prompts`` refuses to replace

    # -- identity and words --------------------------------------------------------------------
    def owns(self, model: nn.Module) -> bool:
        return getattr(model, "model_kind", None) == self.name

    def architecture(self, model: nn.Module) -> str:
        return type(model).__name__

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        return ()

    def input_stride(self, model: nn.Module) -> int:
        return int(model.config.patch_size)

    # -- loading -------------------------------------------------------------------------------
    def probabilities(self, model: nn.Module, logits: Tensor) -> Tensor:
        return logits.softmax(dim=-1)

    def rescore(self, analysis: KindAnalysis, loaded: Loaded) -> KindAnalysis | None:
        return None  # its classes never change under an analysis

    def apply_prompts(self, loaded: Loaded, prompts: Sequence[str]) -> str | None:
        return (
            f"{self.OWNER}'s classes are its head's; prompts need a CLIP-style model "
            "with a text tower"
        )

    # -- analysing -----------------------------------------------------------------------------
    def analyze_images(
        self, loaded: Loaded, images: Sequence[ImageInput], **options: Any
    ) -> Iterator[Any]:
        raise ValueError(f"{self.label} analyses its images one at a time")

    def finish_analysis(self, analysis: KindAnalysis) -> KindAnalysis:
        return analysis  # its own analysis is complete as made

    def intermediates(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        replace: HeadReplacement | None = None,
        logits_only: bool = False,
    ) -> Intermediates:
        raise ValueError(f"vitviz can't take a {self.label} apart into its blocks and heads")

    def readout(self, model: nn.Module) -> Readout:
        """Its network's final norm and head, applied to a block's tokens (DESIGN §5)."""
        raise ValueError(f"vitviz can't read a {self.label}'s blocks out through its head")

    def analysis_blocks(self, analysis: KindAnalysis) -> BlockOutputs | None:
        """None: the analysis kept no block outputs (the accessor's pass makes them)."""
        return None

    def feature_site(self, model: nn.Module, x: Tensor, layer: LayerChoice) -> FeatureSite:
        """The CAM family's layer (DESIGN §5): ``layer``'s part of one of ``cam_blocks``,
        put on the grid by ``tokens_on_grid``."""
        from vitviz.kindapi.feature_sites import FeatureSite, first_item, with_first_item

        blocks = self.cam_blocks(model)
        choice = self.resolve_cam_layer(model, layer)
        block = blocks[choice.block]
        module = block if choice.part == "output" else getattr(block, choice.part, None)
        if module is None:
            raise ValueError(f"block {choice.block} of this {self.label} has no {choice.part}")
        return FeatureSite(
            module=module,
            tensor=first_item,
            to_grid=self.tokens_on_grid(model, x, choice),
            replace=with_first_item,
            depth=len(blocks),
            layer=choice,
        )

    def resolve_cam_layer(self, model: nn.Module, layer: LayerChoice) -> LayerChoice:
        """``layer`` with ``auto`` read as ``default_cam_part`` of the last block and a block of
        −1 as the last one's number; ValueError for a block out of range (DESIGN §5)."""
        from vitviz.kindapi.feature_sites import DEFAULT_LAYER, LayerChoice

        depth = len(self.cam_blocks(model))
        if layer.part == DEFAULT_LAYER:
            layer = LayerChoice(-1, self.default_cam_part(model))
        return layer.resolved(depth)

    def default_cam_part(self, model: nn.Module) -> str:
        """The part of the last block ``auto`` reads (DESIGN §5): its norm1 where that is a
        pre-norm (token Grad-CAM's features, the normalised tokens its attention reads), else
        its output (the tokens the network's final norm and pooling read)."""
        return "norm1" if self.norm1_is_pre_norm(model, -1) else "output"

    def norm1_is_pre_norm(self, model: nn.Module, block: int) -> bool:
        """Whether block ``block`` of ``cam_blocks`` (−1 the last) has a norm1 whose output is
        its input normalised, the tokens its attention reads (DESIGN §5). A block says so by its
        own ``norm1_is_pre_norm`` (True where it says nothing); a post-norm block's norm1
        follows the attention (x + norm1(attn(x)), norm1(x + attn(x))): False, as for a block
        without one norm1 (a norm per branch, no norms)."""
        b = self.cam_blocks(model)[block]
        return getattr(b, "norm1", None) is not None and bool(getattr(b, "norm1_is_pre_norm", True))

    def cam_layers(self, model: nn.Module) -> CamLayers:
        """The window's layer picker's blocks, what ``auto`` reads and which blocks are
        post-norm (``CamLayers``, empty for a model it can't take apart)."""
        from vitviz.kindapi.feature_sites import DEFAULT_LAYER, CamLayers, LayerChoice

        try:
            blocks = self.cam_blocks(model)
            if not blocks:
                return CamLayers()
            auto = self.resolve_cam_layer(model, LayerChoice(-1, DEFAULT_LAYER)).text
        except ValueError:
            return CamLayers()
        post = tuple(
            i
            for i, b in enumerate(blocks)
            if getattr(b, "norm1", None) is not None and not self.norm1_is_pre_norm(model, i)
        )
        return CamLayers(len(blocks), auto, post)

    def cam_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        """The blocks the intermediates accessor's ``blocks`` read, in its order."""
        blocks = getattr(model, "blocks", None)
        if blocks is None:
            raise ValueError(f"vitviz can't take a {self.label} apart into its blocks")
        return list(blocks)

    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        """(tokens channels last, the block's grid) -> (B, C, h, w) for ``layer`` (resolved)."""
        raise ValueError(f"vitviz can't put a {self.label}'s layer {layer.text} on its grid")

    # -- methods -------------------------------------------------------------------------------
    def _methods(self) -> Any:
        return importlib.import_module(self.METHODS_MODULE) if self.METHODS_MODULE else None

    def implementation(self, method: str) -> KindMethod | None:
        module = self._methods()
        return None if module is None else module.METHODS.get(method)

    def missing_method(self, method: str) -> str | None:
        module = self._methods()
        return None if module is None else module.CANNOT.get(method)

    # -- presenting ----------------------------------------------------------------------------
    def map_picture(
        self,
        analysis: Any,
        map_: np.ndarray,
        colormap: str,
        max_side: int | None,
        title: list[str] | None,
    ) -> Image.Image:
        """Over the model input, untitled (each map at its own grid)."""
        return self.over_input(analysis, map_, colormap, 0.6)

    def over_input(
        self, analysis: Any, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        """``values`` (a map of any of its grids) over the model input, taken to the first grid
        (each cell the value of the token covering its centre)."""
        import numpy as np
        import torch

        from vitviz.imaging.overlay import overlay_on_image

        fine = self.token_geometry(analysis).on_grid(torch.as_tensor(np.asarray(values)))
        return overlay_on_image(analysis.pixels, fine.numpy(), colormap=colormap, opacity=opacity)

    def heads_picture(self, analysis: Any, colormap: str, titled: bool) -> Image.Image | None:
        return None  # the window's head grid shows its layers; explain writes no picture

    def unused_options(self) -> Mapping[str, str]:
        return {}

    # -- engine and window ---------------------------------------------------------------------
    def has_head(self, loaded: Loaded) -> bool:
        """Its model has a classification head (maps of a class, faithfulness)."""
        return int(getattr(loaded.model.config, "num_classes", 1)) > 0

    def view_words(self, analysis: Any) -> ViewWords:
        """How the window words its layers and queries."""
        from vitviz.kindapi.protocol import ViewWords

        return ViewWords()

    def model_shape(self, loaded: Loaded) -> ModelShape:
        from vitviz.kindapi.protocol import ModelShape

        depth, heads = self.parameter_bounds(loaded.model)
        config = loaded.model.config.to_dict()
        lines = (f"architecture: {self.architecture(loaded.model)}",)
        return ModelShape(depth, heads, 0, config, f"{depth} layers × {heads} heads", lines)

    def thumbnails(self, analysis: Any) -> tuple[tuple[int, int], int]:
        """The head grid's thumbnails' grid and its cells' side in input pixels."""
        geometry = self.token_geometry(analysis)
        return tuple(geometry.grid), geometry.cell_pixels

    def check_memory(self, model: nn.Module, image_size: tuple[int, int]) -> None:
        return None  # its analysis memory is not modelled

    def default_class(self, session: Session) -> int:
        return int(session.analysis.top_class) if self.has_head(session.loaded) else -1

    def view_map_picture(
        self, session: Session, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        return self.over_input(session.analysis, values, colormap, opacity)
