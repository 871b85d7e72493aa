"""``validate``: the checks of the processed data (stage ``validate``)."""

from __future__ import annotations

from pydantic import Field, field_validator

from agentr1.config.base import SPLITS, _distinct_splits, _Section

# The ChatML control tokens of the scratch tokenizer, SmolLM2 and Qwen (validate.special_tokens).
DEFAULT_SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|pad|>")


class ValidateConfig(_Section):
    """Stage ``validate`` (``agentr1.data.validation``).

    ``leak_allowed_types``: question types whose answer may appear in the question (it is one of
    the compared names). ``max_leak_share``: the largest share of a source's questions (per
    ``source`` value, e.g. hotpotqa, musique) whose answer appears in the question, outside those
    types; 0.0 = none may leak (the synthetic world has none; real HotpotQA/MuSiQue samples have
    about 2%). ``required_splits``: splits that must hold at least one question (a split left out
    may be empty, e.g. ``ood`` for real data without an out-of-domain source).
    ``max_examples``: offending rows (and leaking ids) named per failed check. ``copy_sources``:
    sources whose dev/test/ood answers must be copyable - every word of the answer in the train
    split's texts (the synthetic world builds held-out names from train name parts; real data
    answers are free text, so it is off for them).
    ``max_question_chars`` / ``max_answer_chars`` / ``max_id_chars``: the longest question, answer
    and question or passage id accepted. ``special_tokens``: the policy's special-token strings
    (besides every ``<|name|>`` form); a question, answer or passage holding one is reported with
    its id (the rollout never turns data text into control tokens, but such data is suspect)."""

    report_dir: str = "data/validation"
    leak_allowed_types: list[str] = Field(default_factory=lambda: ["comparison", "bridge_comparison"])
    max_leak_share: float = Field(0.0, ge=0, le=1)
    required_splits: list[str] = Field(default_factory=lambda: list(SPLITS))
    max_examples: int = Field(5, ge=1, le=100)
    copy_sources: list[str] = Field(default_factory=lambda: ["synthetic"])
    # bounds of the content checks (issue 26): longest question / answer / id, and the model's
    # special-token strings that no question, answer or passage may contain
    max_question_chars: int = Field(2048, ge=1)
    max_answer_chars: int = Field(256, ge=1)
    max_id_chars: int = Field(128, ge=1)
    special_tokens: list[str] = Field(default_factory=lambda: list(DEFAULT_SPECIAL_TOKENS))

    @field_validator("special_tokens")
    @classmethod
    def _tokens_not_blank(cls, v: list[str]) -> list[str]:
        if any(not t.strip() for t in v):
            raise ValueError("special_tokens must not hold empty or blank strings")
        return v

    @field_validator("required_splits")
    @classmethod
    def _known_splits(cls, v: list[str]) -> list[str]:
        return _distinct_splits(v)
