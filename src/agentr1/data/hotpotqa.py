"""HotpotQA (distractor and fullwiki) -> unified schema.

Reads both layouts, per record:

* official JSON (``hotpot_*_v1.json``): ``_id``; ``context`` = ``[[title, [sentences]]]``;
  ``supporting_facts`` = ``[[title, sent_idx]]``;
* Hugging Face ``hotpot_qa`` (JSON Lines, Parquet or hub rows): ``id``; ``context`` =
  ``{title: [], sentences: [[]]}``; ``supporting_facts`` = ``{title: [], sent_id: []}``.

Mapping: id ``hotpotqa:<_id|id>``; answers ``[answer]``; type ``bridge`` or ``comparison``;
hops 2; ``supporting_ids`` = the supporting paragraphs in order of first appearance in
``supporting_facts``. Every context paragraph (gold and distractor) becomes a passage
(id :func:`~agentr1.data.realformat.passage_id`) with text = its sentences joined. Fullwiki records
whose gold paragraph is not among their retrieved context paragraphs are kept with
``supporting_ids: []`` and counted (see :func:`agentr1.data.realformat.add_context_question`). Test-set files have no answers and fail on
the missing ``answer`` field. The raw files keep HTML character references in titles
(``Ye Olde Man &amp; Scythe``): ``parse_context`` and ``supporting_titles`` decode titles and texts
once at load (:func:`~agentr1.data.realformat.unescape_entities`), before passages are deduplicated and
supporting facts matched, and ``validate`` checks that no passage title keeps one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from agentr1.data.realformat import Loaded, Record, load_context_records

SOURCE = "hotpotqa"
TYPES = ("bridge", "comparison")
HOPS = 2
log = logging.getLogger(__name__)


def load_hotpotqa(records: Iterable[Record], limit: int | None = None, origin: str = SOURCE) -> Loaded:
    """Map HotpotQA records (``(where, record)`` pairs, see ``read_records``); stop after
    ``limit`` questions."""
    return load_context_records(
        records, limit, origin, source=SOURCE, label="HotpotQA", hops=dict.fromkeys(TYPES, HOPS), logger=log
    )
