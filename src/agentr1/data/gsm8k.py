"""GSM8K (official JSON Lines, ``openai/gsm8k`` on the hub) -> unified schema.

A record is ``{"question": ..., "answer": ...}``; ``answer`` is the worked solution, its last line
``#### N`` the final answer (calculator annotations ``<<48/2=24>>`` inside the steps).

Mapping: id ``gsm8k:<sha1(question)[:16]>`` (records have no id; equal texts are one question:
the repeat is skipped and counted); answers ``[N]`` with N in the canonical number form of
:func:`agentr1.data.answers.normalize_number` (``2,125`` -> ``2125``, ``$5`` -> ``5``); type
``gsm8k``; hops 0, no supporting passage, no corpus passage. A record without the ``#### ``
line or whose final answer is not a number is a :class:`RealDataError` naming the record.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable

from agentr1.data.answers import normalize_number
from agentr1.data.realformat import Loaded, RealDataError, Record, log_skipped, require_text
from agentr1.data.schema import Question

SOURCE = "gsm8k"
TYPE = "gsm8k"
FINAL_MARK = "####"
log = logging.getLogger(__name__)


def final_answer(solution: str, where: str) -> str:
    """The canonical number after the solution's last ``####`` mark."""
    head, mark, tail = solution.rpartition(FINAL_MARK)
    if not mark:
        raise RealDataError(f"{where}: field 'answer' has no final '{FINAL_MARK} N' line")
    number = normalize_number(tail.strip())
    if number is None:
        raise RealDataError(f"{where}: the final answer {tail.strip()!r} after '{FINAL_MARK}' is not a number")
    return number


def load_gsm8k(records: Iterable[Record], limit: int | None = None, origin: str = SOURCE) -> Loaded:
    """Map GSM8K records (``(where, record)`` pairs, see ``read_records``); stop after ``limit``
    questions."""
    loaded, seen = Loaded(), set()
    for where, rec in records:
        if limit is not None and len(loaded.questions) >= limit:
            break
        text = require_text(rec, "question", where)
        answer = final_answer(require_text(rec, "answer", where), where)
        qid = f"{SOURCE}:{hashlib.sha1(text.encode('utf-8')).hexdigest()[:16]}"
        if qid in seen:
            loaded.skipped["repeated question text"] += 1
            continue
        seen.add(qid)
        loaded.add_question(Question(qid, text, [answer], TYPE, 0, [], SOURCE, "").to_dict(), where)
    log_skipped(log, origin, loaded)
    return loaded
