"""The character-level training corpus: real English text installed by a system package.

Default: **The Jargon File, version 4.4.7** (Eric S. Raymond and contributors, 29 Dec 2003), a
lexicon of hacker slang with its essays and folklore, in the public domain ("to be freely used,
shared, and modified", per its Debian copyright file). Debian and Ubuntu ship it as the package
``jargon-text`` (from http://www.catb.org/~esr/jargon/), plain text at
``/usr/share/doc/jargon-text/jargon.txt.gz`` (1.7 MB). Nothing is downloaded at run time; any
UTF-8 text file can be used instead (``--corpus PATH``, plain or ``.gz``).

Normalisation (of the Jargon File only) keeps the text but not the typesetting: the 3-space indentation is removed,
typographic quotes, dashes and non-breaking spaces become ASCII (accents are dropped, the few
Greek letters and symbols left out), lines that only draw table borders are dropped and runs of
blank lines collapse to one: 96 distinct characters. The split is fixed: the first 90 %
of the characters train, the last 10 % validate.
"""
from __future__ import annotations

import gzip
import os
import re
import unicodedata
from dataclasses import dataclass

import torch

JARGON_PATH = "/usr/share/doc/jargon-text/jargon.txt.gz"
CORPUS_NAME = "The Jargon File 4.4.7 (public domain; Debian package jargon-text)"
MISSING_MESSAGE = (
    "corpus not found: {path}\n"
    "The default corpus is the Jargon File from Debian's jargon-text package. Install it with\n"
    "  sudo apt-get install jargon-text\n"
    "or pass --corpus PATH to any UTF-8 text file (plain or .gz)."
)

_ASCII = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u00b4": "'", "\u201c": '"', "\u201d": '"',
    "\u2014": "--", "\u2212": "-", "\u00a0": " ", "\u00b7": "-", "\u2022": "*",
    "\u2192": "->", "\u2190": "<-", "\u00d7": "x", "\u2122": "(TM)", "\u00a9": "(C)", "\u00ae": "(R)",
    "\u2502": "|", "\u00b1": "+/-", "\u00b5": "u", "\u00df": "ss", "\u00e6": "ae", "\u00d8": "O",
})
_BORDER = re.compile(r"^[\s\u2500-\u257f]*$")  # blank or box-drawing only (table rules)


class CorpusNotFoundError(FileNotFoundError):
    pass


def read_text(path: str | None = None) -> str:
    """The text of ``path`` (default: the Jargon File, normalised; another file is used as it
    is). Raises :class:`CorpusNotFoundError` with installation advice when the file is missing."""
    default = path in (None, JARGON_PATH)
    path = path or JARGON_PATH
    if not os.path.isfile(path):
        raise CorpusNotFoundError(MISSING_MESSAGE.format(path=path))
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        raw = f.read()
    return normalise(raw) if default else raw


def normalise(raw: str) -> str:
    text = unicodedata.normalize("NFKD", raw.translate(_ASCII))
    lines = []
    for line in text.splitlines():
        if _BORDER.match(line):
            line = ""
        line = line.encode("ascii", "ignore").decode().rstrip()  # accents, Greek: dropped
        if line.startswith("   "):
            line = line[3:]
        lines.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


@dataclass
class CharCorpus:
    """A character vocabulary and the train / validation token streams (int64, on CPU)."""

    name: str
    chars: list[str]
    train: torch.Tensor
    val: torch.Tensor

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        index = {c: i for i, c in enumerate(self.chars)}
        return torch.tensor([index[c] for c in text if c in index], dtype=torch.long)

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in (ids.tolist() if hasattr(ids, "tolist") else ids))

    def batch(self, split: str, batch_size: int, block: int, generator: torch.Generator | None = None):
        """``batch_size`` random windows of ``block + 1`` characters: inputs (B, block) and
        next-character targets (B, block), int64 on CPU."""
        data = self.train if split == "train" else self.val
        starts = torch.randint(0, data.numel() - block - 1, (batch_size,), generator=generator)
        offsets = starts[:, None] + torch.arange(block + 1)
        windows = data[offsets]
        return windows[:, :-1], windows[:, 1:]


def load(path: str | None = None, val_fraction: float = 0.1) -> CharCorpus:
    """The corpus at ``path`` (default: the Jargon File) as characters, split by position."""
    text = read_text(path)
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    cut = int(len(data) * (1 - val_fraction))
    name = CORPUS_NAME if path in (None, JARGON_PATH) else os.path.basename(path)
    return CharCorpus(name, chars, data[:cut], data[cut:])
