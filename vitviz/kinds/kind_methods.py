"""What a kind's ``methods`` module needs to declare its versions of the table's methods
(DESIGN §5): the requirement that the model is vitviz's own network (``requires_own``), the
compute function of each named version through the kind's one method-map function
(``versions_of``), a query's attention row (``token_query_attention``) and the rollouts
chained across a staged kind's stages (``chained_map``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

# (analysis, query cell of the first grid or None, target class or None, parameters) -> map
MethodCompute = Callable[[Any, "tuple[int, int] | None", "int | None", Mapping[str, Any]], Tensor]


def requires_own(noun: str, *networks: type[nn.Module]) -> Callable[[str, nn.Module], str | None]:
    """``KindMethod.requires``: None for one of ``networks``, else why method ``label`` can't
    run on this model (it reads vitviz's own ``noun``'s parts)."""

    def check(label: str, model: nn.Module) -> str | None:
        if isinstance(model, networks):
            return None
        return f"{label} needs vitviz's own {noun}, and this model is a {type(model).__name__}"

    return check


def versions_of(method_map: Callable[..., Tensor]) -> Callable[[str], MethodCompute]:
    """``version(name)``: the compute function of the kind's version of table method ``name``,
    ``method_map(analysis, name, query, target_class, params)``."""

    def version(name: str) -> MethodCompute:
        def compute(
            analysis: Any,
            query: tuple[int, int] | None,
            target_class: int | None,
            params: Mapping[str, Any],
        ) -> Tensor:
            return method_map(analysis, name, query, target_class, params)

        return compute

    return version


def block_index(analysis: Any, block: int, noun: str = "block", nouns: str = "blocks") -> int:
    """``block`` checked against the analysis's attention layers (negative counts from the
    end); ValueError in one line past them, naming them ``noun`` / ``nouns``."""
    count = len(analysis.attentions)
    if not -count <= block < count:
        raise ValueError(f"{noun} {block} out of range: the model has {count} {nouns}")
    return block % count


def token_under(analysis: Any, stage: int, cell: tuple[int, int]) -> int:
    """The token of ``stage``'s grid (row-major, prefix tokens not counted) covering the
    centre of first-grid cell ``cell`` (each first-grid cell ``analysis.patch_size`` pixels,
    each of the stage's ``analysis.stage_pixels[stage]``), clamped to the grid."""
    p = analysis.patch_size
    y, x = (cell[0] + 0.5) * p, (cell[1] + 0.5) * p
    H, W = analysis.stage_grids[stage]
    px = analysis.stage_pixels[stage]
    r = min(max(int(y // px), 0), H - 1)
    c = min(max(int(x // px), 0), W - 1)
    return r * W + c


def with_gradients_of(analyze: Callable[..., Any]) -> Callable[[Any, int | None], Any]:
    """``with_gradients(analysis, target_class)``: ``analysis`` when it holds the gradients of
    ``target_class`` (None: its own class), else the same input analysed again by
    ``analyze(loaded, input, True, c)`` with them, drawn over the same picture (one class kept
    on ``analysis``: the window asks for one at a time)."""

    def with_gradients(analysis: Any, target_class: int | None) -> Any:
        c = analysis.target_class if target_class is None else int(target_class)
        if analysis.gradients is not None and analysis.target_class == c:
            return analysis
        if analysis.loaded is None or analysis.input is None:
            raise ValueError("this method needs the analysis run with gradients=True")
        cache: dict[int, Any] = vars(analysis).setdefault("_with_gradients", {})
        if c not in cache:
            cache.clear()
            again = analyze(analysis.loaded, analysis.input, True, c)
            again.pixels, again.source, again.geometry = (
                analysis.pixels, analysis.source, analysis.geometry,
            )  # fmt: skip
            cache[c] = again
        return cache[c]

    return with_gradients


def head_of_rows(
    analysis: Any, layer: int, head: int, rows: Callable[[], Tensor], noun: str = "block"
) -> Tensor:
    """(h, w) head ``head``'s row of attention layer ``layer`` (an index checked against the
    analysis's layers) (−1: the heads' mean), of ``rows()`` (heads, h, w), asked only once the
    head is checked; ValueError naming the ``noun`` ("block", "layer") past its heads."""
    heads = int(analysis.attentions[layer].shape[0])
    if not -1 <= head < heads:
        raise ValueError(
            f"head {head} out of range: {noun} {layer} has {heads} heads (-1: their mean)"
        )
    out = rows().float()
    return out.mean(dim=0) if head == -1 else out[head]


def token_query_attention(
    analysis: Any,
    block: int,
    head: int,
    cell: tuple[int, int] | None,
    rows: Callable[[Any, int, int | None], Tensor],
    nouns: tuple[str, str] = ("block", "blocks"),
) -> Tensor:
    """(h, w) attention layer ``block``'s row for ``head`` (−1: the heads' mean) of the token
    of its queries' stage under first-grid cell ``cell`` (None: ``rows``' own choice), from
    ``rows(analysis, layer, token)`` (heads, h, w); ``nouns``: what the errors call a layer."""
    b = block_index(analysis, block, *nouns)
    token = None if cell is None else token_under(analysis, analysis.block_stages[b], cell)
    return head_of_rows(analysis, b, head, lambda: rows(analysis, b, token), nouns[0])


ROLLOUTS = ("rollout", "gradient-rollout", "relevance")


def chained_map(
    analysis: Any,
    name: str,
    token: int | None,
    target_class: int | None,
    params: Mapping[str, Any],
    with_gradients: Callable[[Any, int | None], Any],
) -> Tensor:
    """(H_0, W_0) float32 map of ``name``, one of ``ROLLOUTS``, chained across the stages by
    the analysis's ``prepared`` from last-stage token ``token`` (None: the kind's default):
    rollout with ``params``' fusion, the others with ∂y_c/∂A of ``target_class`` (the
    analysis's ``with_gradients``)."""
    if name == "rollout":
        return analysis.prepared("rollout", str(params.get("fusion", "mean"))).map(token).float()
    return with_gradients(analysis, target_class).prepared(name).map(token).float()


def rollout_methods(
    version: Callable[[str], MethodCompute],
    refusals: Mapping[str, str],
    requires: Callable[[str, nn.Module], str | None],
) -> dict[str, Any]:
    """The kind's rollout, gradient rollout and relevance (``version(name)`` each), every one
    refusing the parameters ``refusals`` says and running where ``requires`` does."""
    from vitviz.kindapi.protocol import KindMethod

    return {
        name: KindMethod(version(name), refusals=refusals, requires=requires) for name in ROLLOUTS
    }
