"""Answer normalization (SQuAD / HotpotQA convention), shared by the reward metrics
(:mod:`agentr1.env.rewards`) and the dataset checks (:mod:`agentr1.data.validation`, which
refuses golds that normalize to nothing)."""

from __future__ import annotations

import re
import string

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, remove ASCII punctuation, remove articles (a, an, the), collapse whitespace."""
    text = str(text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())
