"""CLIP's text tokenizer: byte-level BPE with an end-of-word mark, read from a model folder.

The steps are those of OpenAI CLIP and of Hugging Face's ``CLIPTokenizer``: NFC, runs of
whitespace to one space, lower case; split into pieces (the two special tokens, the
contractions 's 't 're 've 'm 'll 'd, runs of letters, single digits, runs of other non-space
characters; spaces dropped); each piece's UTF-8 bytes mapped to printable characters (GPT-2's
byte table); BPE merges by rank, with ``</w>`` on each piece's last symbol; then
``<|startoftext|>`` ids ``<|endoftext|>``, cut to the context length.

The vocabulary and merges come from ``tokenizer.json`` (what ``save_pretrained`` writes) or
``vocab.json`` + ``merges.txt`` (OpenAI's files), read as JSON and text: nothing runs.
"""

from __future__ import annotations

import gzip
import json
import unicodedata
from collections.abc import Iterator, Sequence
from functools import lru_cache
from itertools import pairwise
from pathlib import Path

START, END = "<|startoftext|>", "<|endoftext|>"
_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
_END_OF_WORD = "</w>"
OPENAI_MERGES = 49152 - 256 - 2  # the merges OpenAI's tokenizer reads from its file


class TokenizerError(ValueError):
    """A tokenizer file vitviz can't read (the message names it)."""


@lru_cache(maxsize=1)
def byte_table() -> dict[int, str]:
    """GPT-2's map of the 256 byte values to printable characters (visible ones map to
    themselves, the others to code points from 256 up)."""
    visible = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    visible += range(ord("®"), ord("ÿ") + 1)
    table, extra = {b: chr(b) for b in visible}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _kind(ch: str) -> str:
    """ "L" letter, "N" number, "S" whitespace, "O" anything else."""
    if ch.isspace():
        return "S"
    cat = unicodedata.category(ch)[0]
    return cat if cat in ("L", "N") else "O"


def pieces(text: str) -> Iterator[str]:
    """The pre-tokenised pieces of normalised ``text`` (see the module docstring)."""
    i, n = 0, len(text)
    while i < n:
        for special in (START, END, *_CONTRACTIONS):
            if text.startswith(special, i):
                yield special
                i += len(special)
                break
        else:
            kind = _kind(text[i])
            j = i + 1
            if kind == "S":
                i = j
                continue
            if kind != "N":  # letters and other characters come in runs
                while j < n and _kind(text[j]) == kind:
                    j += 1
            yield text[i:j]
            i = j


def normalise(text: str) -> str:
    """NFC, whitespace runs to one space, stripped, lower case."""
    return " ".join(unicodedata.normalize("NFC", text).split()).lower()


class ClipTokenizer:
    """Text -> token ids for a CLIP text tower.

    ``vocab`` {token: id}; ``merges`` the BPE merge pairs, best first; ``context_length`` the
    most ids a prompt gives (77 for CLIP), start and end tokens included.
    """

    def __init__(
        self,
        vocab: dict[str, int],
        merges: Sequence[tuple[str, str]],
        context_length: int = 77,
    ) -> None:
        for name in (START, END):
            if name not in vocab:
                raise TokenizerError(f"the tokenizer's vocabulary has no {name}")
        self.vocab = vocab
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.context_length = int(context_length)
        self.start_id, self.end_id = vocab[START], vocab[END]
        self._cache: dict[str, list[str]] = {}

    @classmethod
    def from_folder(cls, folder: str | Path, context_length: int = 77) -> ClipTokenizer:
        """Read ``tokenizer.json``, else ``vocab.json`` + ``merges.txt``, from ``folder``."""
        folder = Path(folder)
        if (folder / "tokenizer.json").is_file():
            vocab, merges = _from_tokenizer_json(folder / "tokenizer.json")
        elif (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
            vocab = _read_json(folder / "vocab.json")
            merges = _merges_from_text(folder / "merges.txt")
        else:
            raise TokenizerError(
                f"{folder.name} has no tokenizer files (tokenizer.json, or vocab.json and "
                "merges.txt)"
            )
        if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
            raise TokenizerError(f"{folder.name}: the tokenizer's vocabulary is not {{token: id}}")
        return cls(vocab, merges, context_length)

    @classmethod
    def from_path(cls, path: str | Path, context_length: int = 77) -> ClipTokenizer:
        """A folder's tokenizer files (``from_folder``), or OpenAI's gzip merges file."""
        path = Path(path)
        if path.is_dir():
            return cls.from_folder(path, context_length)
        return cls.from_openai_merges(path, context_length)

    @classmethod
    def from_openai_merges(cls, path: str | Path, context_length: int = 77) -> ClipTokenizer:
        """OpenAI's vocabulary from its gzip merges file (``bpe_simple_vocab_16e6.txt.gz``):
        the 256 byte characters, each again with ``</w>``, every merge joined, then the start
        and end tokens."""
        path = Path(path)
        try:
            lines = gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise TokenizerError(f"{path.name} is not a readable gzip BPE file ({exc})") from exc
        merges = [tuple(line.split()) for line in lines[1 : OPENAI_MERGES + 1]]
        if len(merges) != OPENAI_MERGES or any(len(m) != 2 for m in merges):
            raise TokenizerError(f"{path.name}: expected {OPENAI_MERGES} merge pairs")
        chars = list(byte_table().values())
        tokens = [*chars, *(c + _END_OF_WORD for c in chars), *("".join(m) for m in merges)]
        vocab = {t: i for i, t in enumerate([*tokens, START, END])}
        return cls(vocab, merges, context_length)  # type: ignore[arg-type]

    def bpe(self, piece: str) -> list[str]:
        """One piece (byte characters) -> its BPE tokens, ``</w>`` on the last."""
        if piece in self._cache:
            return self._cache[piece]
        symbols = [*piece[:-1], piece[-1] + _END_OF_WORD]
        while len(symbols) > 1:
            ranked = [(self.ranks[p], p) for p in pairwise(symbols) if p in self.ranks]
            if not ranked:
                break
            first, second = min(ranked)[1]
            merged, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == first and symbols[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        self._cache[piece] = symbols
        return symbols

    def tokens(self, text: str) -> list[str]:
        """The BPE tokens of ``text`` (no start or end token)."""
        table = byte_table()
        out: list[str] = []
        for piece in pieces(normalise(text)):
            if piece in (START, END):
                out.append(piece)
                continue
            out.extend(self.bpe("".join(table[b] for b in piece.encode("utf-8"))))
        return out

    def encode(self, text: str) -> list[int]:
        """[start, ids..., end], the ids cut so the whole fits ``context_length``. A token
        missing from the vocabulary becomes the end token (CLIP's unknown token)."""
        ids = [self.vocab.get(t, self.end_id) for t in self.tokens(text)]
        ids = ids[: self.context_length - 2]
        return [self.start_id, *ids, self.end_id]


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path.name} can't be read as JSON: {exc}") from exc


def _pair(entry: object, where: str) -> tuple[str, str]:
    if isinstance(entry, str) and entry.count(" ") == 1:
        a, b = entry.split(" ")
        return a, b
    if isinstance(entry, list) and len(entry) == 2 and all(isinstance(s, str) for s in entry):
        return entry[0], entry[1]
    raise TokenizerError(f"{where}: a merge is not a pair of tokens ({entry!r:.40})")


def _from_tokenizer_json(path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    data = _read_json(path)
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE":
        raise TokenizerError(f"{path.name} is not a BPE tokenizer (CLIP's kind)")
    vocab, merges = model.get("vocab"), model.get("merges")
    if not isinstance(vocab, dict) or not isinstance(merges, list):
        raise TokenizerError(f"{path.name} has no vocabulary and merges")
    vocab = dict(vocab)
    for added in data.get("added_tokens") or []:  # the special tokens, where listed apart
        if isinstance(added, dict) and isinstance(added.get("content"), str):
            vocab.setdefault(added["content"], int(added.get("id", -1)))
    return vocab, [_pair(m, path.name) for m in merges]


def _merges_from_text(path: Path) -> list[tuple[str, str]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{path.name} can't be read: {exc}") from exc
    return [_pair(line, path.name) for line in lines if line and not line.startswith("#version")]
