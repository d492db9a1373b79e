"""Safe loading, family detection, conversion to the one model, the native format, labels."""

from vitviz.checkpoints.cache import CacheEntry, list_cached_checkpoints
from vitviz.checkpoints.convert import convert_checkpoint
from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.load import load_checkpoint
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.checkpoints.native import save_checkpoint
from vitviz.checkpoints.reading import CHECKPOINT_SUFFIXES, is_checkpoint_path, read_checkpoint

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "CacheEntry",
    "CheckpointError",
    "LoadedModel",
    "MissingSettingsError",
    "convert_checkpoint",
    "is_checkpoint_path",
    "list_cached_checkpoints",
    "load_checkpoint",
    "read_checkpoint",
    "save_checkpoint",
]
