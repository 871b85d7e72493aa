"""2WikiMultihopQA -> unified schema.

Reads the official layout (``_id``, ``type``, ``question``, ``context`` = ``[[title,
[sentences]]]``, ``supporting_facts`` = ``[[title, sent_idx]]``, ``answer``; ``evidences`` and
``answer_id`` are ignored) as a JSON array *or* JSON Lines whatever the suffix (detected by
``read_records``), and the Hugging Face column layout (``id``, ``context`` = ``{title, sentences}``)
used by hub copies.

Mapping: id ``2wiki:<_id|id>``; answers ``[answer]``; type as given; hops by type —
``bridge_comparison`` 4 (two bridges, then a comparison: four supporting paragraphs), and 2 for
``comparison``, ``compositional`` and ``inference``; ``supporting_ids`` = the supporting paragraphs
in order of first appearance in ``supporting_facts`` (hop order). Context paragraphs become
passages (id :func:`~agentr1.data.realformat.passage_id`).

Records without ``context`` (some derived files carry ``qa_pairs``/``explanation`` instead) give no
corpus to answer from: they are skipped and counted, and a warning with the count is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from agentr1.data.realformat import Loaded, Record, load_context_records

SOURCE = "2wiki"
HOPS = {"comparison": 2, "compositional": 2, "inference": 2, "bridge_comparison": 4}
NO_CONTEXT = "no 'context' (missing or empty)"
log = logging.getLogger(__name__)


def load_twowiki(records: Iterable[Record], limit: int | None = None, origin: str = SOURCE) -> Loaded:
    """Map 2WikiMultihopQA records (``(where, record)`` pairs); stop after ``limit`` questions."""
    return load_context_records(
        records, limit, origin, source=SOURCE, label="2Wiki", hops=HOPS, logger=log, no_context=NO_CONTEXT
    )
