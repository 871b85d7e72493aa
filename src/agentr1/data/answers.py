"""Answer normalization (SQuAD / HotpotQA convention), shared by the reward metrics
(:mod:`agentr1.env.rewards`) and the dataset checks (:mod:`agentr1.data.validation`, which
refuses golds that normalize to nothing); :func:`normalize_text`, the key under which two
question texts are the same question (the split-overlap and leak checks, the real loaders'
deduplication of questions across sources).

Numbers: a string that reads as one number (:func:`normalize_number`: optional sign, optional
``$``, digits with or without thousands commas, an optional decimal part) normalizes to its
canonical decimal form, so ``"$2,125"``, ``"2125.0"`` and ``"2125"`` are one answer and ``"-5"``
keeps its sign. Every other string (names, yes/no, "1923 AD") takes the text path unchanged, and
an integer written plainly ("1923") normalizes to itself on both paths.
"""

from __future__ import annotations

import re
import string
import unicodedata
from decimal import Decimal

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NUMBER = re.compile(r"([-+]?)\s*\$?\s*(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?")
_NON_WORD = re.compile(r"[^\w\s]+", re.UNICODE)
MAX_NUMBER_CHARS = 100  # a longer digit string takes the text path (no huge int conversions)


def normalize_number(text: str) -> str | None:
    """The canonical form of ``text`` when the whole (stripped) string is one number, else None.

    Accepted: ``[sign] [$] digits [.digits]`` where digits are plain (``2125``) or grouped by
    thousands commas (``2,125``); blanks may follow the sign and the ``$``. Canonical form: the
    exact decimal value (:class:`decimal.Decimal`, no float rounding) written without exponent,
    leading zeros or trailing fractional zeros, ``-`` only for negative values: ``"$1,000.50"`` ->
    ``"1000.5"``, ``"72.0"`` -> ``"72"``, ``"-0"`` -> ``"0"``, ``"007"`` -> ``"7"``. A string
    longer than :data:`MAX_NUMBER_CHARS` is not read as a number (a model's runaway digits must
    neither crash nor slow the reward: Python refuses int/str conversions past 4,300 digits).
    """
    text = str(text).strip()
    if len(text) > MAX_NUMBER_CHARS:
        return None
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    sign, whole, frac = m.groups()
    value = Decimal(f"{sign}{whole.replace(',', '')}{frac or ''}")
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def normalize_answer(text: str) -> str:
    """:func:`normalize_number` for a number; otherwise lowercase, remove ASCII punctuation,
    remove articles (a, an, the), collapse whitespace."""
    number = normalize_number(text)
    if number is not None:
        return number
    text = str(text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def normalize_text(text: str) -> str:
    """Unicode NFC, lowercase, punctuation -> space, whitespace collapsed (used for leak and overlap
    checks and question deduplication: texts that differ only in normalization, ``e`` + U+0301 vs
    ``é``, are one text)."""
    return " ".join(_NON_WORD.sub(" ", unicodedata.normalize("NFC", text).lower()).split())
