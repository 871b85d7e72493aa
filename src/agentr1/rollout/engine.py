"""The batched multi-turn rollout loop: policy turn -> environment step -> observation -> ...

For a batch of questions (each repeated ``group_size`` times) the engine builds the prompt
(chat template with ``system = env.system_prompt()`` and ``user = env.user_prompt(question)`` plus
the assistant header), then per turn:

1. generates one turn for every *live* sample only (finished samples never reach the backend
   again), at most ``rollout.batch_size`` prompts per backend call, with the per-turn token
   limit, ``env.stop_strings`` and temperature/top-p from params;
2. hands the env the decode of exactly the ids sampled in that turn (one ``step_batch`` call);
3. tokenizes each observation once and appends its ids with ``action_mask`` 0.

An episode ends when the env says so (its reason: "answer", "no_call", "max_turns"), when the
engine's own ``max_turns`` is reached, or when prompt + response reaches
``rollout.max_total_tokens`` ("max_length"; the last turn or observation is truncated to fit).

Token-exact (ARCHITECTURE invariant 1): the sampled ids and their log-probs are stored as
sampled; the context handed to the backend is the concatenation of stored ids; the history is
never decoded and re-encoded. The engine never trains.

Control tokens come only from the chat template, never from data. Text that comes from data or
tools (the question, observations, scripted turns) is encoded with :func:`encode_data`: a
special-token string in it (``<|im_end|>``, ``<|im_start|>assistant``) becomes ordinary text
tokens, so a passage cannot end a turn or open a role. The prompt uses transformers'
``apply_chat_template(..., sanitize_control_tokens=True)`` (only the template's own markers are
control tokens); a chat-wrapped observation is its template prefix and suffix (:func:`encode`)
around the observation (:func:`encode_data`). Text without special-token strings gets the same
ids as before (the wrapping's pieces meet at a special or tool-tag token in both formats, where the
tokenizer splits anyway), and ``decode`` of the ids is still exactly the text.

The env is duck-typed: ``system_prompt()``, ``user_prompt(question)``, ``stop_strings`` and
``step_batch(turn_texts, turn_indices, supporting_ids) -> list[StepResult]``; its optional
``format`` attribute (``"hermes"``) selects the chat wrapping when ``observation_wrap`` is auto.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from agentr1.rollout.trajectory import Trajectory

_SYS, _USR = "\x00agentr1-system\x00", "\x00agentr1-user\x00"


def decode(tokenizer, ids) -> str:
    """Lossless decode (special tokens kept, no whitespace clean-up)."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def encode(tokenizer, text: str) -> list[int]:
    """Encode trusted template text without adding BOS/EOS: special-token strings in it become
    their control tokens (chat markers the engine itself writes)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_data(tokenizer, text: str) -> list[int]:
    """Encode text that comes from data or tools without adding BOS/EOS: special-token strings in
    it are split into ordinary tokens (``split_special_tokens``), so it never yields a special
    token's id; ordinary added tokens (the tool tags) and text without special-token strings
    encode as with :func:`encode`. The tokenizer's own setting is restored afterwards (a later
    direct backend call must not see this one's)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    before = getattr(backend, "encode_special_tokens", None)
    try:
        return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
    finally:
        if before is not None:
            backend.encode_special_tokens = before


def char_ends(tokenizer, ids: list[int]) -> list[int]:
    """``ends[i]`` = length of the decode of ``ids[: i + 1]`` (made non-decreasing, since a prefix
    ending inside a multi-byte character decodes to a replacement character)."""
    ends, best = [], 0
    for i in range(len(ids)):
        best = max(best, len(decode(tokenizer, ids[: i + 1])))
        ends.append(best)
    return ends


def chat_wrap(tokenizer) -> tuple[str, str]:
    """(prefix, suffix) that put an observation into a user message of the chat template: the
    text the template writes between a system message's content and a user message's content,
    and after the user content with the generation prompt (ChatML:
    ``"<|im_end|>\\n<|im_start|>user\\n"`` and ``"<|im_end|>\\n<|im_start|>assistant\\n"``)."""
    msgs = [{"role": "system", "content": _SYS}, {"role": "user", "content": _USR}]
    text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    a, b = text.index(_SYS) + len(_SYS), text.index(_USR)
    return text[a:b], text[b + len(_USR) :]


class RolloutEngine:
    """Batched multi-turn rollouts of a policy (``backend``) in a tool environment (``env``).

    ``rollout_cfg`` is a ``RolloutConfig``; ``max_turns`` (optional) is an engine-side cap on
    policy turns on top of the env's own limit. After each :meth:`rollout`, :attr:`stats` holds
    counters (generated/observation tokens, backend calls, seconds in generate and in the env).
    """

    def __init__(self, backend, env, tokenizer, rollout_cfg, max_turns: int | None = None):
        self.backend = backend
        self.env = env
        self.tokenizer = tokenizer
        self.cfg = rollout_cfg
        self.max_turns = max_turns
        wrap = rollout_cfg.observation_wrap
        if wrap == "auto":
            wrap = "chat" if getattr(env, "format", None) == "hermes" else "inline"
        self.wrap = wrap
        self._prefix, self._suffix = chat_wrap(tokenizer) if wrap == "chat" else ("", "")
        self.stats: dict[str, float] = {}

    # -------------------------------------------------------------------------- pieces
    def prompt_ids(self, question: dict[str, Any]) -> list[int]:
        """Token ids of the chat prompt for ``question`` (ends with the assistant header); a
        special-token string in the question or system prompt is encoded as text (module docstring)."""
        msgs = [
            {"role": "system", "content": self.env.system_prompt()},
            {"role": "user", "content": self.env.user_prompt(question["question"])},
        ]
        ids = self.tokenizer.apply_chat_template(
            msgs, tokenize=True, add_generation_prompt=True, sanitize_control_tokens=True, return_dict=False
        )
        return [int(i) for i in ids]

    def observation_ids(self, observation: str, turn_text: str) -> list[int]:
        """Token ids of :meth:`wrap_observation`: the chat wrapping's prefix and suffix as template
        text, the observation itself as data (:func:`encode_data`)."""
        prefix, body, suffix = self.observation_parts(observation, turn_text)
        return encode(self.tokenizer, prefix) + encode_data(self.tokenizer, body) + encode(self.tokenizer, suffix)

    def wrap_observation(self, observation: str, turn_text: str) -> str:
        """The text appended after a policy turn: as is (``inline``) or inside a user message
        (``chat``; the assistant message is closed first unless the turn already closed it, and
        the observation's surrounding newlines are dropped, as chat templates render a tool
        response: ``<|im_start|>user\n<tool_response>...</tool_response><|im_end|>``)."""
        return "".join(self.observation_parts(observation, turn_text))

    def observation_parts(self, observation: str, turn_text: str) -> tuple[str, str, str]:
        """(template prefix, observation text, template suffix) of :meth:`wrap_observation`."""
        if self.wrap == "inline":
            return "", observation, ""
        prefix = self._prefix
        eos = self.tokenizer.eos_token
        if eos and turn_text.endswith(eos) and prefix.startswith(eos):
            prefix = prefix[len(eos) :]
        return prefix, observation.strip("\n"), self._suffix

    # -------------------------------------------------------------------------- the loop
    def rollout(self, questions: list[dict[str, Any]], group_size: int = 1, seed: int = 0) -> list[Trajectory]:
        """Roll out every question ``group_size`` times; returns the trajectories in order
        (question-major: the ``group_size`` samples of question 0 first). Deterministic for a
        given seed, weights and backend.

        A backend that keeps state across turns (the HF backend's KV cache) is reset before and
        after (``backend.reset()``, when it has one): the weights may change between rollouts."""
        reset = getattr(self.backend, "reset", None)
        if reset is not None:
            reset()
        try:
            return self._rollout(questions, group_size, seed)
        finally:
            if reset is not None:
                reset()

    def _rollout(self, questions: list[dict[str, Any]], group_size: int, seed: int) -> list[Trajectory]:
        cfg = self.cfg
        trajs, supporting = self._start(questions, group_size)
        rng = torch.Generator().manual_seed(seed)
        stats = dict(generated_tokens=0, observation_tokens=0, backend_calls=0, turns=0, generate_s=0.0, env_s=0.0)
        stop_strings = list(self.env.stop_strings)
        live = list(range(len(trajs)))
        turn = 0
        while live:
            if self.max_turns is not None and turn >= self.max_turns:
                for i in live:
                    trajs[i].reason = "max_turns"
                break
            budget = {i: min(cfg.max_turn_tokens, cfg.max_total_tokens - len(trajs[i].input_ids)) for i in live}
            for i in [i for i in live if budget[i] <= 0]:
                trajs[i].reason = "max_length"
            live = [i for i in live if budget[i] > 0]
            if not live:
                break
            gens = self._generate(
                [trajs[i].input_ids for i in live], [budget[i] for i in live], stop_strings, rng, stats
            )
            texts = [
                self._append_turn(trajs[i], g.token_ids[: budget[i]], g.logprobs[: budget[i]])
                for i, g in zip(live, gens)
            ]
            stats["generated_tokens"] += sum(len(trajs[i].response_ids) - trajs[i].turn_spans[-1][0] for i in live)
            t0 = time.perf_counter()
            results = self.env.step_batch(texts, [turn] * len(live), [supporting[i] for i in live])
            stats["env_s"] += time.perf_counter() - t0
            if len(results) != len(live):
                raise RuntimeError(f"env.step_batch returned {len(results)} results for {len(live)} turns")
            still = []
            for i, text, res in zip(live, texts, results):
                t = trajs[i]
                t.outcomes.append(list(res.outcomes))
                if res.answer is not None:
                    t.answer = res.answer
                if res.done:
                    t.reason = res.reason
                    continue
                stats["observation_tokens"] += self._append_observation(t, res.observation, text)
                if t.reason == "max_length":
                    continue
                still.append(i)
            live = still
            turn += 1
            stats["turns"] = turn
        for t in trajs:
            t.response_text = "".join(x for pair in _interleave(t.turn_texts, t.observations) for x in pair)
        counters = getattr(self.backend, "counters", None)
        if counters:
            stats.update(
                prefilled_tokens=counters["prefilled"],
                shared_prefix_tokens=counters.get("shared", 0),
                reused_tokens=counters["reused"],
            )
        self.stats = stats
        return trajs

    def _start(self, questions: list[dict[str, Any]], group_size: int) -> tuple[list[Trajectory], list[list[str]]]:
        """Empty trajectories (question-major) and each one's supporting passage ids."""
        trajs, supporting = [], []
        for q in questions:
            pids = self.prompt_ids(q)
            text = decode(self.tokenizer, pids)
            for g in range(group_size):
                trajs.append(
                    Trajectory(
                        qid=str(q["id"]),
                        question=q["question"],
                        golds=list(q.get("answers", [])),
                        prompt_ids=list(pids),
                        sample_index=g,
                        prompt_text=text,
                    )
                )
                supporting.append(list(q.get("supporting_ids", [])))
        return trajs, supporting

    def _generate(self, contexts, budgets, stop_strings, rng: torch.Generator, stats: dict):
        """One turn for each context, in backend calls of at most ``batch_size`` prompts (each
        call asks for its chunk's largest budget; the caller trims each to its own)."""
        t0 = time.perf_counter()
        gens = []
        for c in range(0, len(contexts), self.cfg.batch_size):
            chunk_seed = int(torch.randint(0, 2**31 - 1, (1,), generator=rng))
            gens += self.backend.generate(
                contexts[c : c + self.cfg.batch_size],
                max(budgets[c : c + self.cfg.batch_size]),
                stop_strings,
                self.cfg.temperature,
                self.cfg.top_p,
                chunk_seed,
            )
            stats["backend_calls"] += 1
        stats["generate_s"] += time.perf_counter() - t0
        if len(gens) != len(contexts):
            raise RuntimeError(f"backend returned {len(gens)} generations for {len(contexts)} prompts")
        return gens

    def _append_turn(self, t: Trajectory, ids: list[int], logprobs: list[float]) -> str:
        """Append one policy turn (mask 1, sampled log-probs); return the text the env sees."""
        start = len(t.response_ids)
        t.response_ids.extend(ids)
        t.action_mask.extend([1] * len(ids))
        t.logprobs.extend(float(x) for x in logprobs)
        t.turn_spans.append((start, len(t.response_ids)))
        text = decode(self.tokenizer, ids)
        t.turn_texts.append(text)
        t.turn_char_ends.append(char_ends(self.tokenizer, ids))
        return text

    def _append_observation(self, t: Trajectory, observation: str, turn_text: str) -> int:
        """Tokenize the wrapped observation once (:meth:`observation_ids`) and append it (mask 0);
        truncate to the total length limit (then the episode ends with reason "max_length").
        Returns the number of tokens added."""
        ids = self.observation_ids(observation, turn_text)
        text = self.wrap_observation(observation, turn_text)
        room = self.cfg.max_total_tokens - len(t.input_ids)
        if len(ids) > room:
            ids = ids[: max(room, 0)]
            text = decode(self.tokenizer, ids)
            t.reason = "max_length"
        t.response_ids.extend(ids)
        t.action_mask.extend([0] * len(ids))
        t.logprobs.extend([0.0] * len(ids))
        t.observations.append(text)
        return len(ids)


def _interleave(turns: list[str], observations: list[str]):
    for k, turn in enumerate(turns):
        yield (turn, observations[k] if k < len(observations) else "")
