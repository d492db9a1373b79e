"""The viewer's state as a function of the model it shows (DESIGN §6).

What a model offers (its methods and why some can't run, its classes or prompts, its head
statistics) and what the user chose (a method, a class) give every method choice, class, title,
message and statistics note the viewer shows: ``derive``. Nothing here remembers the model shown
before, so nothing of it can stay on screen after a switch. Pure (numpy, no Qt): the viewer
applies the result; tests call it on every kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from vitviz.workers.messages import ImageResult, MethodInfo

ATTENTION = "attention"
PROBABILITY_LABELS = {
    "logits": "probability",
    "probabilities": "probability (the model's own output)",
    "log-probabilities": "probability (exp of the model's log-probabilities)",
    "sigmoid": "probability (each prompt's own sigmoid, not a softmax: SigLIP)",
}
PREDICTIONS_TITLE = "<b>Predictions</b> (click a bar to explain that {noun})"
NO_PROMPTS_TITLE = "<b>Predictions</b> (none yet: type prompts below)"
NO_CLASSES_TITLE = "<b>Predictions</b> (none: this model has no classifier)"
# what a control that measures a class says on a model without classes (DESIGN §6)
NO_CLASSES = "measures a class, and this model has none (no classifier, or no prompts yet)"
NO_CLASS_TO_EXPLAIN = "No class to explain: this model has none (no classifier, or no prompts yet)"
STAT_KEYS = ("distance", "entropy", "prefix", "norms")
# a map whose values spread less than this share of its largest magnitude is nearly uniform
NEARLY_UNIFORM = 0.2


@dataclass(frozen=True)
class Choices:
    """What the user chose, kept across models: ``method`` (a name of the method table) and
    ``target_class`` (None: the top prediction)."""

    method: str = ATTENTION
    target_class: int | None = None


@dataclass(frozen=True)
class ViewState:
    """What the viewer shows for one model and image.

    ``method``: the method shown (the chosen one where this model runs it, else the nearest one
    it runs); ``method_note``: why another one is shown, in full (None: the chosen one is);
    ``shown_class``: the class explained and marked in the chart (None: the model has none);
    ``stats_notes``: per statistics plot (STAT_KEYS) why it is empty, None where it has points;
    ``method_brief``: ``method_note`` in one short line, as the map's view shows it (the full
    note in its tooltip, so the map stays in sight at 1280 × 720).
    """

    method: str
    method_note: str | None
    shown_class: int | None
    class_text: str
    predictions_title: str
    predictions_axis: str
    stats_notes: dict[str, str | None] = field(default_factory=dict)
    method_brief: str | None = None


def nearest_runnable(
    wanted: str, methods: Sequence[MethodInfo], unavailable: Mapping[str, str]
) -> str:
    """``wanted`` where it can run (it is in ``methods`` and not ``unavailable``), else the first
    of its table entry's ``nearest`` that can, else the runnable method closest to it in the
    table with the same need of gradients, else raw attention."""
    names = [m.name for m in methods]
    runnable = [n for n in names if n not in unavailable]
    if wanted in runnable or not runnable:
        return wanted
    info = next((m for m in methods if m.name == wanted), None)
    if info is not None:
        for name in info.nearest:
            if name in runnable:
                return name
        at = names.index(wanted)
        same = [m.name for m in methods if m.name in runnable]
        same.sort(
            key=lambda n: (
                methods[names.index(n)].needs_gradients != info.needs_gradients,
                abs(names.index(n) - at),
            )
        )
        if same:
            return same[0]
    return ATTENTION if ATTENTION in runnable else runnable[0]


def label_of(name: str, methods: Sequence[MethodInfo]) -> str:
    return next((m.label for m in methods if m.name == name), name)


def fallback_note(wanted: str, shown: str, reason: str, methods: Sequence[MethodInfo]) -> str:
    """Why ``shown`` is on screen instead of ``wanted`` (the model's reason, in full)."""
    reason, label = reason.rstrip("."), label_of(wanted, methods)
    said = reason if reason.startswith(label) else f"{label} can't run on this model ({reason})"
    return (
        f"{label_of(shown, methods)} shown instead: {said}. {label} comes back when a model "
        "that can run it is opened."
    )


def fallback_brief(wanted: str, shown: str, methods: Sequence[MethodInfo]) -> str:
    """``fallback_note`` in one short line: what is shown, what can't run (why: its tooltip)."""
    return (
        f"{label_of(shown, methods)} shown instead: {label_of(wanted, methods)} can't run on "
        "this model (hover for why)."
    )


def shown_class(target: int | None, top_class: int, class_names: Sequence[str]) -> int | None:
    """The class explained: ``target`` if this model has it, else its top prediction, None for a
    model without classes (never −1, never a class of the model shown before)."""
    n = len(class_names)
    if target is not None and 0 <= target < n:
        return target
    return top_class if 0 <= top_class < n else None


def class_words(c: int | None, class_names: Sequence[str]) -> str | None:
    """A title's words for class ``c`` ("class “tabby”"), None when the model has no class c."""
    if c is None or not 0 <= c < len(class_names):
        return None
    return f"class “{class_names[c]}”"


def predictions_words(
    image: ImageResult | None, takes_prompts: bool, prompts: Sequence[str]
) -> tuple[str, str]:
    """The predictions chart's title and axis label for this model."""
    if takes_prompts and not prompts:
        return NO_PROMPTS_TITLE, "probability"
    if image is None:
        return PREDICTIONS_TITLE.format(noun="class"), "probability"
    if not image.class_names:
        return NO_CLASSES_TITLE, "probability"
    axis = image.words.probability or PROBABILITY_LABELS.get(image.scores, "probability")
    return PREDICTIONS_TITLE.format(noun=image.words.class_noun), axis


def stats_notes(
    distance: np.ndarray,
    entropy: np.ndarray,
    prefix: np.ndarray,
    norms: np.ndarray,
    num_prefix: int,
    per_image_norms: bool = True,
) -> dict[str, str | None]:
    """Per statistics plot (STAT_KEYS), why it has no point to show, None where it has one:
    ``distance``, ``entropy``, ``prefix`` (L, H); ``norms`` (L, N)."""

    def empty(values: np.ndarray) -> bool:
        return not np.isfinite(np.asarray(values, dtype=np.float64)).any()

    notes: dict[str, str | None] = dict.fromkeys(STAT_KEYS)
    for key, values, what in (
        ("distance", distance, "mean attention distance"),
        ("entropy", entropy, "attention entropy"),
    ):
        if empty(values):
            notes[key] = f"No {what}: this model's attention has no patch query to measure."
    if num_prefix == 0:
        notes["prefix"] = (
            "This model has no prefix tokens (no CLS, no register tokens): no attention goes "
            "to one, so there is no share to plot."
        )
    elif empty(prefix):
        notes["prefix"] = "No layer here lets a patch attend to a prefix token."
    if not per_image_norms:
        notes["norms"] = "Token norms are measured per image: open one to see them."
    elif empty(norms):
        notes["norms"] = "This model's tokens have no norms to show here."
    return notes


def derive(
    image: ImageResult | None,
    methods: Sequence[MethodInfo],
    choices: Choices,
    takes_prompts: bool = False,
    prompts: Sequence[str] = (),
) -> ViewState:
    """The viewer's state for ``image`` (what the model offers; None before one) and the user's
    ``choices``: see ``ViewState``."""
    unavailable = {} if image is None else dict(image.unavailable)
    method = nearest_runnable(choices.method, methods, unavailable)
    note = brief = None
    if method != choices.method and choices.method in unavailable:
        note = fallback_note(choices.method, method, unavailable[choices.method], methods)
        brief = fallback_brief(choices.method, method, methods)
    names = [] if image is None else list(image.class_names)
    top = -1 if image is None else image.top_class
    c = shown_class(choices.target_class, top, names)
    if c is None:
        class_text = "(no prompts yet)" if takes_prompts else "(model has no classes)"
    else:
        chosen = choices.target_class is not None and c == choices.target_class
        class_text = names[c] + ("" if chosen else " (top prediction)")
    title, axis = predictions_words(image, takes_prompts, prompts)
    notes = (
        dict.fromkeys(STAT_KEYS)
        if image is None
        else stats_notes(
            image.mean_distance,
            image.entropy,
            image.prefix_share,
            image.token_norms,
            image.num_prefix_tokens,
        )
    )
    return ViewState(method, note, c, class_text, title, axis, notes, brief)


@dataclass(frozen=True)
class MapScale:
    """The large map's colour levels and what the view says about them (None: nothing)."""

    levels: tuple[float, float] | None  # None: the canvas's own (nice_levels)
    note: str | None


def map_scale(
    values: np.ndarray | None,
    levels: tuple[float, float] | None,
    query_cell: tuple[int, int] | None = None,
) -> MapScale:
    """Colour levels for a (h, w) map shown with the method's ``levels`` (None: the canvas's):
    the query's own cell (``query_cell``, on the map's grid) is left out of the scale (its
    self-term would set it, and the rest would look empty); a nearly uniform map (its values
    spread less than NEARLY_UNIFORM of their largest magnitude) is stretched over its own
    range, and said so."""
    if values is None:
        return MapScale(levels, None)
    rest = np.array(values, dtype=np.float64)
    notes = []
    if query_cell is not None and rest.ndim == 2:
        r, c = query_cell
        if 0 <= r < rest.shape[0] and 0 <= c < rest.shape[1] and rest.size > 1:
            own = rest[r, c]
            rest[r, c] = np.nan
            finite = rest[np.isfinite(rest)]
            if finite.size and np.isfinite(own) and own > finite.max():
                notes.append(
                    f"The query's own patch (outlined, value {own:.3g}) is left out of the "
                    "colour scale: it would hide the rest."
                )
                levels = None
    finite = rest[np.isfinite(rest)]
    if finite.size == 0:
        return MapScale(levels, None)
    lo, hi = float(finite.min()), float(finite.max())
    top = max(abs(lo), abs(hi))
    if hi > lo and hi - lo < NEARLY_UNIFORM * top:
        notes.append(
            f"Nearly uniform: every value lies in {lo:.3g}–{hi:.3g}; the colours span that "
            "range to show the structure there is."
        )
        return MapScale((lo, hi), " ".join(notes))
    if notes:  # the query's cell left out: the scale follows the rest
        return MapScale((lo, hi) if hi > lo else None, " ".join(notes))
    return MapScale(levels, None)
