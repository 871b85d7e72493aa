"""BM25 over title + text with ``bm25s`` (the default backend of the CPU profile).

``bm25s`` builds the index: it precomputes the BM25 contribution of every (term, passage) pair into
a sparse term-major (CSC) matrix, so a query's scores are the sum of its terms' columns. Building
and saving use ``bm25s``; the query path reads that matrix directly with exact MaxScore pruning
(see :meth:`BM25Retriever._top_k`): rare terms are scored first, and once the remaining frequent
terms cannot lift an outside passage into the top k, only the candidates' entries of those long
posting lists are looked up. Results equal ``bm25s``' exhaustive scores (tested); on the 100k
benchmark this is ~3x faster than summing every posting list, which is what reaches the
``bench/retrieval.py`` single-core target. Passages that contain none of the query terms are never
returned (like Lucene/pyserini), so a query may get fewer than ``k`` hits.

Text analysis is ours, applied identically to passages and queries: lower-case, the ``bm25s``
token pattern (runs of >= 2 word characters), stop-word removal (``bm25.stopwords``: a language
name or code from ``bm25s.stopwords``, or null), then the Snowball stemmer (``bm25.stemmer``).
The settings are stored in ``meta.json`` so a loaded index always analyses queries the way it
analysed its passages.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentr1.config import BM25Config, RetrievalConfig
from agentr1.retrieval.base import Hit, Retriever, RetrieverError, check_search_args
from agentr1.retrieval.corpus import PassageStore, read_meta, write_meta

log = logging.getLogger(__name__)

# bm25s.selection runs a JAX top-k when it is imported and JAX is installed, and JAX then takes 75% of
# a GPU's memory for itself (seen on a GPU machine: the policy beside it ran out of memory). This
# retriever never uses JAX: keep it on the CPU unless the user chose otherwise.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

BACKEND = "bm25"
MODEL_DIR = "bm25s"
TOKEN_RE = re.compile(r"(?u)\b\w\w+\b")

# language names/codes accepted by ``bm25.stopwords`` -> attribute of ``bm25s.stopwords``
_STOPWORD_LISTS = {
    "en": "STOPWORDS_EN",
    "english": "STOPWORDS_EN",
    "en_plus": "STOPWORDS_EN_PLUS",
    "de": "STOPWORDS_GERMAN",
    "german": "STOPWORDS_GERMAN",
    "fr": "STOPWORDS_FRENCH",
    "french": "STOPWORDS_FRENCH",
    "es": "STOPWORDS_SPANISH",
    "spanish": "STOPWORDS_SPANISH",
    "it": "STOPWORDS_ITALIAN",
    "italian": "STOPWORDS_ITALIAN",
    "pt": "STOPWORDS_PORTUGUESE",
    "portuguese": "STOPWORDS_PORTUGUESE",
    "nl": "STOPWORDS_DUTCH",
    "dutch": "STOPWORDS_DUTCH",
    "da": "STOPWORDS_DANISH",
    "danish": "STOPWORDS_DANISH",
    "sv": "STOPWORDS_SWEDISH",
    "swedish": "STOPWORDS_SWEDISH",
    "no": "STOPWORDS_NORWEGIAN",
    "norwegian": "STOPWORDS_NORWEGIAN",
    "ru": "STOPWORDS_RUSSIAN",
    "russian": "STOPWORDS_RUSSIAN",
    "tr": "STOPWORDS_TURKISH",
    "turkish": "STOPWORDS_TURKISH",
}


def stopword_set(name: str | None) -> frozenset[str]:
    """The stop-word list called ``name`` (``None`` or ``"none"`` = keep every word)."""
    if name is None or name.lower() == "none":
        return frozenset()
    import bm25s.stopwords as lists

    attr = _STOPWORD_LISTS.get(name.lower())
    if attr is None:
        raise RetrieverError(
            f"retrieval.bm25.stopwords: unknown list {name!r}; allowed: null, none, "
            + ", ".join(sorted(_STOPWORD_LISTS))
        )
    return frozenset(getattr(lists, attr))


def index_settings(cfg: BM25Config) -> dict[str, Any]:
    """The params an index depends on (stored in ``meta.json``; a loaded index must match them)."""
    return {"method": cfg.method, "k1": cfg.k1, "b": cfg.b, "stopwords": cfg.stopwords, "stemmer": cfg.stemmer}


class Analyzer:
    """Text -> list of index terms (lower-case, token pattern, stop words, stemmer)."""

    def __init__(self, stopwords: str | None, stemmer: str) -> None:
        self.stopwords_name = stopwords
        self.stemmer_name = stemmer
        self._stop = stopword_set(stopwords)
        if stemmer == "none":
            self._stem = None
        else:
            import Stemmer

            try:
                self._stem = Stemmer.Stemmer(stemmer).stemWords
            except KeyError:
                raise RetrieverError(f"retrieval.bm25.stemmer: PyStemmer has no {stemmer!r} stemmer") from None

    def __call__(self, text: str) -> list[str]:
        words = TOKEN_RE.findall(text.lower())
        if self._stop:
            words = [w for w in words if w not in self._stop]
        return self._stem(words) if self._stem is not None and words else words


class BM25Retriever(Retriever):
    """Sparse BM25 retrieval over a :class:`PassageStore` (build with :meth:`build`, or :meth:`load`)."""

    def __init__(self, model: Any, passages: PassageStore, analyzer: Analyzer, settings: Mapping[str, Any]):
        self.model = model
        self.passages = passages
        self.analyzer = analyzer
        self.settings = dict(settings)
        self._vocab: dict[str, int] = model.vocab_dict
        self._data = np.asarray(model.scores["data"])
        self._indices = np.asarray(model.scores["indices"])
        self._indptr = np.asarray(model.scores["indptr"], dtype=np.int64)
        self._nonoccurrence = model.nonoccurrence_array
        self._n = int(model.scores["num_docs"])
        lengths = np.diff(self._indptr)
        self._max_weight = np.zeros(len(lengths), dtype=np.float64)
        nonempty = lengths > 0
        if self._data.size:
            self._max_weight[nonempty] = np.maximum.reduceat(self._data, self._indptr[:-1][nonempty])
        # MaxScore needs each term's postings sorted by passage (bm25s writes them that way; check)
        steps = np.diff(self._indices.astype(np.int64))
        column_start = np.zeros(len(self._indices), dtype=bool)
        column_start[self._indptr[:-1][nonempty]] = True
        self._local = threading.local()
        self.pruned_queries = 0  # queries answered by MaxScore pruning (a statistic for tests/benchmarks)
        self._sorted_postings = bool(np.all((steps > 0) | column_start[1:]))

    # ------------------------------------------------------------------ build / save / load
    @classmethod
    def build(cls, corpus_rows: Iterable[Mapping[str, Any]], cfg: BM25Config) -> BM25Retriever:
        """Analyse and index every passage (title + text)."""
        import bm25s

        passages = corpus_rows if isinstance(corpus_rows, PassageStore) else PassageStore.from_rows(corpus_rows)
        analyzer = Analyzer(cfg.stopwords, cfg.stemmer)
        t0 = time.perf_counter()
        vocab: dict[str, int] = {}
        doc_ids: list[list[int]] = []
        for text in passages.indexed_texts():
            doc_ids.append([vocab.setdefault(term, len(vocab)) for term in analyzer(text)])
        if not vocab:
            raise RetrieverError("no passage contains an indexable word (every token is a stop word or too short)")
        log.info("bm25: analysed %d passages (%d terms) in %.1fs", len(passages), len(vocab), time.perf_counter() - t0)
        model = bm25s.BM25(method=cfg.method, k1=cfg.k1, b=cfg.b)
        model.index((doc_ids, vocab), create_empty_token=False, show_progress=False)
        return cls(model, passages, analyzer, index_settings(cfg))

    @classmethod
    def index_corpus(
        cls, corpus_rows: Iterable[Mapping[str, Any]], retrieval_cfg: RetrievalConfig, seed: int = 0
    ) -> BM25Retriever:
        """``agentr1 index`` with ``retrieval.backend: bm25`` (:class:`~agentr1.retrieval.base.IndexBackend`;
        no randomness, ``seed`` is unused)."""
        return cls.build(corpus_rows, retrieval_cfg.bm25)

    @classmethod
    def open_index(
        cls, directory: str | Path, retrieval_cfg: RetrievalConfig, meta: Mapping[str, Any]
    ) -> BM25Retriever:
        """The index in ``directory``, which must have been built with the params' ``retrieval.bm25``
        settings (``meta`` is its ``meta.json``)."""
        wanted = index_settings(retrieval_cfg.bm25)
        if meta.get("bm25") != wanted:
            raise RetrieverError(
                f"the index in {directory} was built with bm25 settings {meta.get('bm25')} but params say "
                f"{wanted}: rerun `agentr1 index` (or `dvc repro index`)"
            )
        return cls.load(directory)

    def save(self, directory: str | Path) -> None:
        """Write ``meta.json``, ``passages.parquet`` and the ``bm25s`` matrix into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save(directory / MODEL_DIR, show_progress=False)
        self.passages.save(directory)
        write_meta(directory, {"backend": BACKEND, "passages": len(self.passages), "bm25": self.settings})

    @classmethod
    def load(cls, directory: str | Path) -> BM25Retriever:
        """Load an index written by :meth:`save` (query analysis follows the stored settings)."""
        import bm25s

        directory = Path(directory)
        meta = read_meta(directory)
        if meta.get("backend") != BACKEND:
            raise RetrieverError(f"{directory} holds a {meta.get('backend')!r} index, not a BM25 one")
        try:
            model = bm25s.BM25.load(directory / MODEL_DIR, show_progress=False)
        except (OSError, ValueError) as exc:
            raise RetrieverError(
                f"cannot read the BM25 index in {directory} ({exc}): rebuild it with `agentr1 index`"
            ) from None
        settings = meta["bm25"]
        retriever = cls(
            model, PassageStore.load(directory), Analyzer(settings["stopwords"], settings["stemmer"]), settings
        )
        if retriever._n != len(retriever.passages):
            raise RetrieverError(
                f"{directory}: the BM25 matrix has {retriever._n} passages but passages.parquet has "
                f"{len(retriever.passages)}: rebuild it with `agentr1 index`"
            )
        return retriever

    # ---------------------------------------------------------------------------- search
    def term_ids(self, query: str) -> np.ndarray:
        """Vocabulary ids of the query's terms (unknown terms dropped, repeats kept, as bm25s does)."""
        vocab = self._vocab
        return np.fromiter((vocab[t] for t in self.analyzer(query) if t in vocab), dtype=np.int64)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for ``query`` (float64, length = number of passages)."""
        return self._scores(self.term_ids(query))

    def _scores(self, term_ids: np.ndarray) -> np.ndarray:
        starts, ends = self._indptr[term_ids], self._indptr[term_ids + 1]
        rows = np.concatenate([self._indices[s:e] for s, e in zip(starts, ends)])
        weights = np.concatenate([self._data[s:e] for s, e in zip(starts, ends)])
        return np.bincount(rows, weights=weights, minlength=self._n)

    def _buffer(self) -> np.ndarray:
        """This thread's score accumulator (zeroed after each query; one per thread for the server)."""
        acc = getattr(self._local, "acc", None)
        if acc is None:
            acc = self._local.acc = np.zeros(self._n, dtype=np.float64)
        return acc

    def _top_k(self, term_ids: np.ndarray, k: int) -> list[Hit]:
        """Exact top-k with MaxScore pruning.

        Terms are taken in decreasing order of their largest contribution (rare, high-idf terms
        first; their posting lists are short). After each term, ``theta`` = the k-th best partial
        score is a lower bound on the final k-th best score; once the remaining terms together
        cannot add more than ``theta``, no passage outside the current candidates can enter the
        top k. The candidates' contributions from those remaining (frequent, long-list) terms are
        then looked up by binary search instead of scanning their whole posting lists.
        """
        if len(term_ids) == 0:
            return []
        terms, counts = np.unique(term_ids, return_counts=True)  # a repeated query term counts twice
        bound = self._max_weight[terms] * counts
        order = np.argsort(-bound, kind="stable")
        terms, counts, rest = terms[order], counts[order], np.cumsum(bound[order][::-1])[::-1]
        acc = self._buffer()  # all zeros on entry; reset below before returning
        try:
            cand, scores = self._rank(terms, counts, rest, k, acc)
        except BaseException:
            acc.fill(0.0)
            raise
        order = np.lexsort((cand, -scores))[:k]  # score descending, then index order
        offset = float(self._nonoccurrence[term_ids].sum()) if self._nonoccurrence is not None else 0.0
        return [self.passages.hit(int(cand[i]), scores[i] + offset) for i in order]

    def _rank(self, terms: np.ndarray, counts: np.ndarray, rest: np.ndarray, k: int, acc: np.ndarray):
        """(passage rows, scores) of the top ``k`` and any passages tied with the k-th, unordered;
        leaves ``acc`` all zeros again."""
        seen: list[np.ndarray] = []
        used, cand = 0, None
        while used < len(terms):
            s, e = self._indptr[terms[used]], self._indptr[terms[used] + 1]
            rows = self._indices[s:e]
            acc[rows] += self._data[s:e] * counts[used]  # rows within one term are unique
            used += 1
            if used == len(terms) or not self._sorted_postings or cand is False:
                continue
            seen.append(rows)
            union = np.unique(np.concatenate(seen)) if len(seen) > 1 else rows
            if len(union) > self._n // 8:
                cand = False  # the frequent terms come first: pruning cannot pay off, score densely
            elif len(union) >= k and rest[used] < np.partition(acc[union], len(union) - k)[len(union) - k]:
                cand = union
                self.pruned_queries += 1
                break
        if cand is None or cand is False:  # every term was scored into ``acc``
            if k < self._n:  # the k best, plus every passage tied with the k-th (sorted out by index)
                kth = acc[np.argpartition(-acc, k - 1)[:k]].min()
                cand = np.flatnonzero(acc >= kth) if kth > 0 else np.flatnonzero(acc)
            else:
                cand = np.flatnonzero(acc)  # weights are > 0: score 0 = no query term in the passage
            scores = acc[cand]
            acc.fill(0.0)
        else:
            scores = acc[cand]
            for rows in seen:
                acc[rows] = 0.0
            for term, count in zip(terms[used:], counts[used:]):
                s, e = self._indptr[term], self._indptr[term + 1]
                pos = np.searchsorted(self._indices[s:e], cand)
                found = pos < e - s
                found[found] = self._indices[s + pos[found]] == cand[found]
                scores[found] += self._data[s + pos[found]] * count
            if len(cand) > k:
                kth = scores[np.argpartition(-scores, k - 1)[:k]].min()
                keep = scores >= kth
                cand, scores = cand[keep], scores[keep]
        return cand, scores

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` passages for each query, best first (one core, queries one after another)."""
        check_search_args(queries, k)
        return [self._top_k(self.term_ids(q), k) for q in queries]
