"""Real multi-hop QA datasets -> the unified schema (entry point of the real-data loaders).

``data.real.sources`` in ``params.yaml`` lists what to load; each source is a local file in the
dataset's original format (``path``) or a dataset on the hub (``hub_id``/``hub_config``/
``hub_split``, read through ``datasets.load_dataset``; users online only). Known hub copies
(``hub_id`` / ``hub_config`` / ``hub_split``):

* hotpotqa: ``hotpotqa/hotpot_qa`` / ``distractor`` or ``fullwiki`` / ``train``, ``validation``
* 2wiki: ``framolfese/2WikiMultihopQA`` / none / ``train``, ``validation``
* musique: ``dgslibisey/MuSiQue`` / none / ``train``, ``validation``
* flashrag: ``RUC-NLPIR/FlashRAG_datasets`` / ``hotpotqa``, ``nq``, ... / ``train``, ``dev``, ``test``
* gsm8k: ``openai/gsm8k`` / ``main`` / ``train``, ``test`` (arithmetic word problems, no passages:
  :mod:`.gsm8k`)

Per-dataset mapping rules live in :mod:`.hotpotqa`, :mod:`.twowiki`, :mod:`.musique`,
:mod:`.flashrag` and :mod:`.gsm8k`, each a loader registered by name in
:data:`agentr1.registry.DATASETS` (entry-point group ``agentr1.datasets``, where a plug-in adds
its own); file reading, passage ids and errors in :mod:`.realformat`.

:func:`load_real` loads every source (``limit`` = at most that many questions), drops a question
whose text (:func:`~agentr1.data.answers.normalize_text`) an earlier source or record already
brought (counted under a reason that names that source: :func:`duplicate_reason`), assigns
splits (``split: auto`` = a seeded shuffle cut by ``data.real.ratios``; other values put the whole
source in that split, e.g. MuSiQue as ``ood``), merges the corpora built from the records' own
context paragraphs (equal passages of two sources share one id and are kept once) and adds
``data.real.corpus`` (a FlashRAG/Search-R1 corpus jsonl) when set, less the passages equal to
one already there. It returns the dataset and the *records report* (``manifest.json``
``records``): per source, the questions kept, the records skipped per reason, the questions kept
without gold passages and the passages it brought that the corpus already held. Bad input raises
:class:`RealDataError` (a ``ValueError``) naming the source (``data.real.sources[1].path``), the
file, the record and the field.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from agentr1.config import SPLITS, RealConfig, RealSource, SplitRatios
from agentr1.data.answers import normalize_text
from agentr1.data.flashrag import export_flashrag, import_flashrag, read_flashrag_corpus
from agentr1.data.realformat import CorpusBuilder, Loaded, RealDataError, Record, clean_value, read_records
from agentr1.data.schema import Dataset, gold_unknown
from agentr1.registry import DATASETS, UnknownName

log = logging.getLogger(__name__)

__all__ = [
    "LOADER_OPTIONS",
    "RealDataError",
    "Loaded",
    "assign_splits",
    "export_flashrag",
    "hub_rows",
    "import_flashrag",
    "load_file",
    "load_real",
    "load_source",
    "load_sources",
    "read_flashrag_corpus",
    "read_records",
    "split_counts",
]

# What every loader may be given besides ``records``, ``limit`` and ``origin``; each takes the ones
# in its signature (``namespace``: FlashRAG's id prefix, the file's stem or the hub config).
LOADER_OPTIONS = frozenset({"namespace"})


def run_loader(dataset: str, records: Iterable[Record], limit: int | None, origin: str, namespace: str) -> Loaded:
    """Map ``records`` with the loader of ``dataset`` in :data:`~agentr1.registry.DATASETS`
    (``fn(records, limit=, origin=[, namespace=]) -> Loaded``); an unknown dataset is a
    :class:`RealDataError` naming the available ones."""
    try:
        DATASETS.check(dataset)
    except UnknownName as exc:
        raise RealDataError(str(exc)) from None
    return DATASETS.call(dataset, records, limit=limit, origin=origin, namespace=namespace, shared=LOADER_OPTIONS)


def hub_rows(hub_id: str, hub_config: str | None, hub_split: str) -> Iterator[Record]:
    """Rows of a hub dataset as ``(where, row)`` pairs (the only place that touches the hub).

    Calls ``datasets.load_dataset(hub_id, hub_config, split=hub_split)`` right away; any failure
    (offline, unknown id/config/split) becomes a :class:`RealDataError` naming all three. Rows pass
    through :func:`~agentr1.data.realformat.clean_value` as file records do (NFC text).
    """
    import datasets

    try:
        rows = datasets.load_dataset(hub_id, hub_config, split=hub_split)
    except Exception as exc:  # noqa: BLE001 - any hub failure is reported with its cause
        raise RealDataError(
            f"could not load {hub_id!r} (config {hub_config!r}, split {hub_split!r}) from the hub: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    label = f"{hub_id}[{hub_config or 'default'}:{hub_split}]"
    return ((f"{label} row {i}", clean_value(row, f"{label} row {i}")) for i, row in enumerate(rows))


def load_file(dataset: str, path: str | Path, limit: int | None = None) -> Loaded:
    """Load one local file of ``dataset`` (a name of :data:`~agentr1.registry.DATASETS`:
    ``hotpotqa``, ``2wiki``, ``musique``, ``flashrag``, ``gsm8k`` or a plug-in's)."""
    path = Path(path)
    return run_loader(dataset, read_records(path), limit, str(path), namespace=path.stem)


def load_source(src: RealSource) -> Loaded:
    """Load one configured source from its ``path`` or, without one, from the hub."""
    if src.path is not None:
        return load_file(src.dataset, src.path, src.limit)
    assert src.hub_id is not None  # RealSource guarantees path or hub_id
    rows = hub_rows(src.hub_id, src.hub_config, src.hub_split)
    return run_loader(
        src.dataset, rows, src.limit, src.hub_id, namespace=src.hub_config or src.hub_id.rsplit("/", 1)[-1]
    )


def split_counts(n: int, ratios: SplitRatios) -> dict[str, int]:
    """Questions per split for ``n`` questions: floors of ``n * ratio``, the remainder going to
    the largest fractional parts (ties: train, dev, test). Sums to ``n`` exactly."""
    shares = {"train": n * ratios.train, "dev": n * ratios.dev, "test": n * ratios.test}
    counts = {k: int(v) for k, v in shares.items()}
    by_fraction = sorted(shares, key=lambda k: -(shares[k] - counts[k]))  # stable: ties keep order
    for k in by_fraction[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


def assign_splits(
    questions: Sequence[dict[str, Any]], split: str, ratios: SplitRatios, seed: str
) -> list[dict[str, Any]]:
    """Copies of ``questions`` with ``split`` set; ``auto`` = shuffle with ``random.Random(seed)``
    and cut by :func:`split_counts`. Questions keep their file order within each split."""
    if split != "auto":
        return [{**q, "split": split} for q in questions]
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    counts = split_counts(len(questions), ratios)
    labels: list[str] = [""] * len(questions)
    rank = 0
    for name in ("train", "dev", "test"):
        for i in order[rank : rank + counts[name]]:
            labels[i] = name
        rank += counts[name]
    return [{**q, "split": label} for q, label in zip(questions, labels)]


def _source_label(i: int, src: RealSource) -> str:
    """``data.real.sources[i].path (dataset)``: the config key; the errors behind it name the file
    (or the hub id) themselves."""
    field = "path" if src.path is not None else "hub_id"
    return f"data.real.sources[{i}].{field} ({src.dataset})"


def duplicate_reason(i: int, dataset: str) -> str:
    """The skip reason of a question whose text source ``i`` (dataset ``dataset``) already brought."""
    return f"question text already in data.real.sources[{i}] ({dataset})"


def _source_entry(i: int, src: RealSource, loaded: Loaded) -> dict[str, Any]:
    """The records report of one source before deduplication (see :func:`load_real`)."""
    return {
        "source": f"data.real.sources[{i}]",
        "dataset": src.dataset,
        "location": str(src.path)
        if src.path is not None
        else f"{src.hub_id}[{src.hub_config or 'default'}:{src.hub_split}]",
        "split": src.split,
        "questions": 0,
        "skipped": dict(sorted(loaded.skipped.items())),
        "without_gold": 0,
        "passages": len(loaded.passages),
        "passages_already_in_corpus": 0,
    }


def load_real(real_cfg: RealConfig, seed: int) -> tuple[Dataset, dict[str, Any]]:
    """Load, deduplicate, split and merge every source in ``real_cfg``: the :class:`Dataset` and
    the records report (module docstring; deterministic, sorted reasons).

    The shuffle of source ``i`` is seeded with ``"<seed>:<i>:<dataset>"`` (deterministic across
    runs and processes). A question whose normalized text an earlier question (of any source, this
    one included) has is dropped before the split is cut and counted under
    :func:`duplicate_reason`, naming the source that keeps it; a warning names both ids. A
    question id that an earlier source brought with the same content (the same file listed twice,
    say) is such a duplicate too; with other content it raises :class:`RealDataError` naming both
    records. A source that yields no question and any bad file or record raise
    :class:`RealDataError` naming the source.
    """
    questions: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    corpus = CorpusBuilder()
    owner: dict[str, tuple[int, str, dict[str, Any]]] = {}  # question id -> (source index, where, question)
    texts: dict[str, tuple[int, str]] = {}  # normalized question text -> (source index, question id)
    report: list[dict[str, Any]] = []
    for i, src in enumerate(real_cfg.sources):
        label = _source_label(i, src)
        try:
            loaded = load_source(src)
        except RealDataError as exc:
            raise RealDataError(f"{label}: {exc}") from None
        if not loaded.questions:
            skipped = ", ".join(f"{n} {why}" for why, n in sorted(loaded.skipped.items())) or "none"
            raise RealDataError(f"{label}: no usable question (skipped: {skipped})")
        entry = _source_entry(i, src, loaded)
        kept = _first_copies(i, label, loaded, real_cfg, owner, texts, entry["skipped"])
        entry["skipped"] = dict(sorted(entry["skipped"].items()))
        entry["questions"] = len(kept)
        entry["without_gold"] = sum(gold_unknown(q) for q in kept)
        for q in assign_splits(kept, src.split, real_cfg.ratios, f"{seed}:{i}:{src.dataset}"):
            questions[q["split"]].append(q)
        try:
            entry["passages_already_in_corpus"] = corpus.extend(loaded.passages, label)
        except RealDataError as exc:
            raise RealDataError(f"{label}: {exc}") from None
        report.append(entry)
    records: dict[str, Any] = {"sources": report}
    if real_cfg.corpus is not None:
        records["corpus"] = _add_corpus(real_cfg.corpus, corpus)
    return Dataset(questions=questions, corpus=corpus.passages()), records


def _first_copies(
    i: int,
    label: str,
    loaded: Loaded,
    real_cfg: RealConfig,
    owner: dict[str, tuple[int, str, dict[str, Any]]],
    texts: dict[str, tuple[int, str]],
    skipped: dict[str, int],
) -> list[dict[str, Any]]:
    """The questions of source ``i`` whose normalized text no earlier question has (:func:`load_real`):
    ``owner`` and ``texts`` record the kept ones, ``skipped`` counts the dropped ones under
    :func:`duplicate_reason`; an id an earlier source holds with other content raises."""
    kept, duplicates = [], []
    for q in loaded.questions:
        where, _ = loaded.where.get(q["id"], (label, q))  # a plug-in loader may append without add_question
        if q["id"] not in owner:
            owner[q["id"]] = (i, where, q)
        elif owner[q["id"]][2] != q:  # the same content falls to the text check below: a counted copy
            j, first, _ = owner[q["id"]]
            raise RealDataError(
                f"{label}: question id {q['id']!r} at {where} is also at {first} "
                f"(data.real.sources[{j}]) with other content: remove one of the two records "
                "or give them distinct ids"
            )
        key = normalize_text(q["question"])
        if key in texts:
            j, first = texts[key]
            reason = duplicate_reason(j, real_cfg.sources[j].dataset)
            skipped[reason] = skipped.get(reason, 0) + 1
            duplicates.append(f"{q['id']} (= {first})")
            continue
        texts[key] = (i, q["id"])
        kept.append(q)
    if duplicates:
        log.warning(
            "%s: dropped %d question(s) whose text an earlier question has: %s%s",
            label,
            len(duplicates),
            ", ".join(duplicates[:5]),
            f" (+{len(duplicates) - 5} more)" if len(duplicates) > 5 else "",
        )
    return kept


def _add_corpus(location: Any, corpus: CorpusBuilder) -> dict[str, Any]:
    """Extend ``corpus`` with the FlashRAG corpus at ``location`` (``data.real.corpus``); its records entry."""
    try:
        passages = read_flashrag_corpus(location)
        return {
            "location": str(location),
            "passages": len(passages),
            "passages_already_in_corpus": corpus.extend(passages, "data.real.corpus"),
        }
    except RealDataError as exc:
        raise RealDataError(f"data.real.corpus: {exc}") from None


def load_sources(real_cfg: RealConfig, seed: int) -> Dataset:
    """The dataset of :func:`load_real`, without its records report."""
    return load_real(real_cfg, seed)[0]
