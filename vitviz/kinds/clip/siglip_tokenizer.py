"""SigLIP's tokenizer: SentencePiece's Unigram model, read from a Hugging Face ``tokenizer.json``.

The pipeline is the one the file describes, in order: the added tokens are matched in the raw
text; the rest is normalised (``Sequence`` of ``Lowercase``, ``Replace`` (a string or a
regular expression), ``Strip``, ``Prepend``, the Unicode forms NFC/NFD/NFKC/NFKD), split into
pre-tokens (``Metaspace``: spaces become "▁", one is put in front, each piece starts at a "▁";
``WhitespaceSplit``), each pre-token is cut into the vocabulary's pieces by Viterbi (the
segmentation whose scores sum highest; a character no piece starts with is the unknown piece,
scored the lowest score - 10, neighbouring unknowns fused into one), and the post-processor's
template adds the special tokens (e.g. "</s>" after the text). Anything else in the file is
refused in one line naming it. A folder with only ``spiece.model`` (SentencePiece's protobuf)
is refused too: vitviz reads ``tokenizer.json``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vitviz.kinds.clip.tokenizer import TokenizerError

METASPACE = "▁"
UNKNOWN_PENALTY = 10.0  # an unknown character scores the lowest piece's score minus this


def _normalizer(spec: Mapping[str, Any] | None) -> Callable[[str], str]:
    """A ``normalizer`` entry -> str -> str."""
    if spec is None:
        return lambda s: s
    kind = spec.get("type")
    if kind == "Sequence":
        steps = [_normalizer(s) for s in spec.get("normalizers", [])]

        def sequence(s: str) -> str:
            for step in steps:
                s = step(s)
            return s

        return sequence
    if kind == "Lowercase":
        return str.lower
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return lambda s, form=kind: unicodedata.normalize(form, s)
    if kind == "Strip":
        left, right = bool(spec.get("strip_left", True)), bool(spec.get("strip_right", True))

        def strip(s: str) -> str:
            s = s.lstrip() if left else s
            return s.rstrip() if right else s

        return strip
    if kind == "Prepend":
        prepend = str(spec.get("prepend", ""))
        return lambda s: prepend + s if s else s
    if kind == "Replace":
        pattern, content = spec.get("pattern", {}), str(spec.get("content", ""))
        if "String" in pattern:
            old = str(pattern["String"])
            return lambda s: s.replace(old, content)
        if "Regex" in pattern:
            try:
                regex = re.compile(str(pattern["Regex"]))
            except re.error as exc:
                raise TokenizerError(
                    f"tokenizer.json: a Replace pattern vitviz can't read: {exc}"
                ) from exc
            return lambda s: regex.sub(lambda _m: content, s)
    raise TokenizerError(f"tokenizer.json: the normalizer {kind!r} is not one vitviz reads")


def _pre_tokenizer(spec: Mapping[str, Any] | None) -> Callable[[list[str]], list[str]]:
    """A ``pre_tokenizer`` entry -> pieces -> finer pieces."""
    if spec is None:
        return lambda parts: parts
    kind = spec.get("type")
    if kind == "Sequence":
        steps = [_pre_tokenizer(s) for s in spec.get("pretokenizers", [])]

        def sequence(parts: list[str]) -> list[str]:
            for step in steps:
                parts = step(parts)
            return parts

        return sequence
    if kind == "WhitespaceSplit":
        return lambda parts: [w for p in parts for w in p.split()]
    if kind == "Metaspace":
        mark = str(spec.get("replacement", METASPACE))
        scheme = str(spec.get("prepend_scheme", "always"))
        if "add_prefix_space" in spec and "prepend_scheme" not in spec:  # older files
            scheme = "always" if spec["add_prefix_space"] else "never"
        split = bool(spec.get("split", True))

        def metaspace(parts: list[str]) -> list[str]:
            out = []
            for i, part in enumerate(parts):
                s = part.replace(" ", mark)
                if (scheme == "always" or (scheme == "first" and i == 0)) and not s.startswith(
                    mark
                ):
                    s = mark + s
                if not split:
                    out.append(s)
                    continue
                pieces = re.split(f"(?={re.escape(mark)})", s)  # each piece starts at a mark
                out.extend(p for p in pieces if p)
            return out

        return metaspace
    raise TokenizerError(f"tokenizer.json: the pre-tokenizer {kind!r} is not one vitviz reads")


class UnigramTokenizer:
    """Text -> token ids as the ``tokenizer.json`` it was read from says (module docstring)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        model = data.get("model") or {}
        if model.get("type") != "Unigram":
            raise TokenizerError(
                f"tokenizer.json holds a {model.get('type')!r} model: SigLIP's is Unigram"
            )
        vocab = model.get("vocab") or []
        self.pieces = [str(p) for p, _ in vocab]
        self.scores = [float(s) for _, s in vocab]
        if not self.pieces:
            raise TokenizerError("tokenizer.json: the Unigram vocabulary is empty")
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self.unk_id = model.get("unk_id")
        self.byte_fallback = bool(model.get("byte_fallback", False))
        self.unk_score = min(self.scores) - UNKNOWN_PENALTY
        self.longest = max(len(p) for p in self.pieces)
        self.normalize = _normalizer(data.get("normalizer"))
        self.pre_tokenize = _pre_tokenizer(data.get("pre_tokenizer"))
        added = [t for t in data.get("added_tokens") or [] if t.get("content")]
        self.added = {str(t["content"]): int(t["id"]) for t in added}
        self._added = (
            re.compile("|".join(re.escape(c) for c in sorted(self.added, key=len, reverse=True)))
            if self.added
            else None
        )
        self.template = self._template(data.get("post_processor"))

    def _template(self, spec: Mapping[str, Any] | None) -> list[int | None]:
        """The single-sequence template: None where the text goes, ids of special tokens."""
        if spec is None:
            return [None]
        if spec.get("type") != "TemplateProcessing":
            raise TokenizerError(
                f"tokenizer.json: the post-processor {spec.get('type')!r} is not one vitviz reads"
            )
        special = spec.get("special_tokens") or {}
        out: list[int | None] = []
        for item in spec.get("single") or []:
            if "Sequence" in item:
                out.append(None)
            else:
                name = item["SpecialToken"]["id"]
                out.extend(int(i) for i in special[name]["ids"])
        return out

    @classmethod
    def from_folder(cls, folder: str | Path) -> UnigramTokenizer:
        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            if (folder / "spiece.model").is_file():
                raise TokenizerError(
                    f"{folder.name} has only spiece.model: vitviz reads SigLIP's tokenizer "
                    "from tokenizer.json (save the fast tokenizer beside the weights)"
                )
            raise TokenizerError(f"{folder.name} has no tokenizer.json")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TokenizerError(f"tokenizer.json can't be read as JSON: {exc}") from exc
        return cls(data)

    # -- encoding ---------------------------------------------------------------------------
    def _viterbi(self, text: str) -> list[int]:
        """The pieces of one pre-token with the highest total score (ids)."""
        n = len(text)
        score = [float("-inf")] * (n + 1)
        back: list[tuple[int, int]] = [(-1, -1)] * (n + 1)  # (start, id) of the best last piece
        score[0] = 0.0
        unk = -1 if self.unk_id is None else int(self.unk_id)
        for start in range(n):
            if score[start] == float("-inf"):
                continue
            single = False
            for end in range(start + 1, min(n, start + self.longest) + 1):
                i = self.ids.get(text[start:end])
                if i is None:
                    continue
                single = single or end == start + 1
                s = score[start] + self.scores[i]
                if back[end][0] < 0 or s > score[end]:
                    score[end], back[end] = s, (start, i)
            if not single:
                s = score[start] + self.unk_score
                if back[start + 1][0] < 0 or s > score[start + 1]:
                    score[start + 1], back[start + 1] = s, (start, unk)
        spans: list[tuple[int, int, int]] = []  # (start, end, id)
        end = n
        while end > 0:
            start, i = back[end]
            spans.append((start, end, i))
            end = start
        spans.reverse()
        out: list[int] = []
        last_unknown = False
        for start, end, i in spans:
            if i == unk and self.byte_fallback:
                hexes = [f"<0x{b:02X}>" for b in text[start:end].encode()]
                if all(h in self.ids for h in hexes):
                    out.extend(self.ids[h] for h in hexes)
                    last_unknown = False
                    continue
            if i < 0:
                raise TokenizerError(f"{text[start:end]!r} has no piece and there is no unk_id")
            if i == unk and last_unknown:
                continue  # unknown characters side by side are one unknown token
            out.append(i)
            last_unknown = i == unk
        return out

    def _text_ids(self, text: str) -> list[int]:
        normalized = self.normalize(text)
        if not normalized:
            return []
        ids: list[int] = []
        for piece in self.pre_tokenize([normalized]):
            ids.extend(self._viterbi(piece))
        return ids

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, special tokens of the template included."""
        ids: list[int] = []
        parts: Sequence[str] = [text] if self._added is None else self._split_added(text)
        for part in parts:
            if part in self.added:
                ids.append(self.added[part])
            else:
                ids.extend(self._text_ids(part))
        out: list[int] = []
        for slot in self.template:
            if slot is None:
                out.extend(ids)
            else:
                out.append(slot)
        return out

    def _split_added(self, text: str) -> list[str]:
        assert self._added is not None
        parts, at = [], 0
        for m in self._added.finditer(text):
            parts += [text[at : m.start()], m.group()]
            at = m.end()
        parts.append(text[at:])
        return [p for p in parts if p]
