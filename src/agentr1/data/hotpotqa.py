"""HotpotQA (distractor and fullwiki) -> unified schema.

Reads both layouts, per record:

* official JSON (``hotpot_*_v1.json``): ``_id``; ``context`` = ``[[title, [sentences]]]``;
  ``supporting_facts`` = ``[[title, sent_idx]]``;
* Hugging Face ``hotpot_qa`` (JSON Lines, Parquet or hub rows): ``id``; ``context`` =
  ``{title: [], sentences: [[]]}``; ``supporting_facts`` = ``{title: [], sent_id: []}``.

Mapping: id ``hotpotqa:<_id|id>``; answers ``[answer]``; type ``bridge`` or ``comparison``;
hops 2; ``supporting_ids`` = the supporting paragraphs in order of first appearance in
``supporting_facts``. Every context paragraph (gold and distractor) becomes a passage with id
``hotpotqa:<sha1(title, text)[:16]>`` and text = its sentences joined. Fullwiki records whose gold
paragraph is not among their retrieved context paragraphs are skipped and counted (see
:func:`agentr1.data.realformat.add_context_question`). Test-set files have no answers and fail on
the missing ``answer`` field.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from agentr1.data.realformat import (
    CorpusBuilder,
    RealDataError,
    Loaded,
    Record,
    add_context_question,
    log_skipped,
    parse_context,
    record_id,
    require,
    require_text,
    supporting_titles,
    where_id,
)

SOURCE = "hotpotqa"
TYPES = ("bridge", "comparison")
HOPS = 2
log = logging.getLogger(__name__)


def load_hotpotqa(records: Iterable[Record], limit: int | None = None, origin: str = SOURCE) -> Loaded:
    """Map HotpotQA records (``(where, record)`` pairs, see ``read_records``); stop after
    ``limit`` questions."""
    loaded, corpus = Loaded(), CorpusBuilder()
    for where, rec in records:
        if limit is not None and len(loaded.questions) >= limit:
            break
        where = where_id(where, rec, "_id", "id")
        qtype = require_text(rec, "type", where)
        if qtype not in TYPES:
            raise RealDataError(f"{where}: field 'type' is {qtype!r}; HotpotQA types are {list(TYPES)}")
        add_context_question(
            loaded,
            corpus,
            source=SOURCE,
            qid=f"{SOURCE}:{record_id(rec, where, '_id', 'id')}",
            text=require_text(rec, "question", where),
            answers=[require_text(rec, "answer", where)],
            qtype=qtype,
            hops=HOPS,
            context=parse_context(require(rec, "context", (list, dict, str), where), where),
            titles=supporting_titles(require(rec, "supporting_facts", (list, dict, str), where), where),
            where=where,
        )
    loaded.passages = corpus.passages()
    log_skipped(log, origin, loaded)
    return loaded
