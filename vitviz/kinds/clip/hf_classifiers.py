"""Hugging Face ``SiglipForImageClassification`` and ``CLIPForImageClassification`` folders (an
image tower fine-tuned with a ``classifier``) -> vitviz's plain ViT with that classifier as its
head: a classifier in the file is never dropped. The SigLIP and CLIP families read the tower and
hand it here (``classifier_conversion``).

transformers' forward, which vitviz's ViT computes as it does:

- SigLIP: the tower's tokens after ``post_layernorm`` (no CLS token), their mean, the
  ``classifier``. The tower's attention-pool head (``vision_model.head.*``, when the config has
  ``vision_use_head``) is held by the library's model and never read by its logits: dropped with
  a note.
- CLIP: the tower's tokens *before* ``post_layernorm`` (which only the pooled CLS output reads:
  dropped with a note), the mean of the patch tokens (CLS left out), the ``classifier``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Source
from vitviz.checkpoints.families.common import dropped, finish, refuse_leftovers
from vitviz.checkpoints.families.hf_library import LIBRARY_MODEL
from vitviz.checkpoints.labels import names_from_id2label
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import hf_preprocessing

CLASSIFIERS = {"siglip": "SiglipForImageClassification", "clip": "CLIPForImageClassification"}


def has_classifier(source: Source, model_type: str) -> bool:
    """A folder of ``model_type`` ("siglip" or "clip") whose file holds a ``classifier`` beside
    the image tower (its ``…ForImageClassification``)."""
    cfg = source.hf_config
    return (
        cfg is not None
        and cfg.get("model_type") == model_type
        and "classifier.weight" in source.state
        and "vision_model.embeddings.patch_embedding.weight" in source.state
    )


def drop_unread(state: dict[str, Tensor], prefix: str, what: str, notes: list[str]) -> None:
    """Remove the tensors under ``prefix`` (a part the classifier's forward never reads) with a
    note naming them."""
    gone = [k for k in state if k.startswith(prefix)]
    for key in gone:
        del state[key]
    if gone:
        notes.append(dropped(gone, what))


def classifier_conversion(
    source: Source,
    model_type: str,
    fields: dict[str, Any],
    out: dict[str, Tensor],
    processor: dict[str, Any],
    notes: list[str],
) -> Conversion:
    """The ViT conversion of a tower read by ``fields`` (ViTConfig fields; global_pool "avg"),
    its tensors ``out`` under vitviz's names, and the file's ``classifier`` as the head; every
    other tensor left in ``source.state`` refuses. ``processor``: the tower's image processor's
    defaults, used when the folder has no preprocessor_config.json."""
    name = CLASSIFIERS[model_type]
    state = source.state
    try:
        out["head.weight"] = state.pop("classifier.weight")
        out["head.bias"] = state.pop("classifier.bias")
    except KeyError as exc:
        raise CheckpointError(f"{source.name}: a {name} checkpoint without {exc}") from exc
    looks_like = f"transformers' {name}"
    refuse_leftovers(source, state, looks_like)
    num_classes, width = out["head.weight"].shape
    if width != fields["dim"]:
        raise CheckpointError(
            f"{source.name}: a classifier over {width} features of {fields['dim']}-wide tokens"
        )
    fields = {**fields, "num_classes": int(num_classes), "global_pool": "avg"}
    proc = source.preprocessor
    if proc is None:
        proc = processor
        notes.append(f"no preprocessor_config.json: the {model_type} image processor's defaults")
    prep, prep_notes = hf_preprocessing(proc, tuple(fields["image_size"]))
    cfg = source.hf_config or {}
    conversion = finish(
        source,
        family=f"huggingface-{model_type}-classifier",
        looks_like=looks_like,
        inferred=fields,
        required={},
        state=out,
        class_names=names_from_id2label(cfg.get("id2label"), int(num_classes)),
        preprocessing=prep,
        notes=notes + prep_notes,
    )
    conversion.reference = Reference(
        "transformers", name, {"model_type": model_type}, how=LIBRARY_MODEL
    )
    return conversion
