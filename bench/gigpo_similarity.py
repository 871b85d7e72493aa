"""What does GiGPO's similarity grouping cost per step, and does its bound hold? (issue 48, item 5)

``agentr1.rl.steps.anchor_groups`` groups the turns of a question's episodes by their anchor state.
Exact matching hashes each state (one dict lookup per turn). With ``train.gigpo.similarity < 1`` a
state that matches no group exactly is compared by ``difflib`` with each group's representative:
before issue 48 on whole context states, which grew with the turns (a 1,000-token state against
each representative, quadratic in the worst case: 23.8 s per step at 32 questions x 8 episodes,
263 s at groups of 32, against 0.07 s exact). Now three bounds apply: only the last
``train.gigpo.window`` tokens (default 256) are compared, difflib's O(1) ``real_quick_ratio``
skips a representative before any real comparison, and a turn gets at most
``train.gigpo.max_compare`` real comparisons (default 8; ``quick_ratio``, then ``ratio``).

This bench builds batches like the trainer's (per question a shared prompt, then turns of a
short action and a retrieved passage drawn from the question's few passages, so that states
coincide and nearly coincide as in a search episode), and times per batch: exact matching, the
old unbounded rule (whole states, no filters; skipped where it would take minutes), the default
bounds (window 256, max_compare 8), the window alone (no cap), and verl-agent's ``observation``
anchor under the default bounds; each the best of 3 wall times (the old rule: one). Table on stdout, ``bench/results/gigpo_similarity.json``.

    .venv/bin/python bench/gigpo_similarity.py
"""

from __future__ import annotations

import argparse
import difflib
import json
import random
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from agentr1.rl.steps import anchor_groups, anchor_states  # noqa: E402


def batch(questions: int, episodes: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Right-padded ``input_ids`` / ``action_mask`` of ``questions x episodes`` episodes of about
    ``length`` tokens: a 40 % prompt shared by the question's episodes, then turns of an action
    (6 tokens from the question's 3 queries + 2 random) and an observation (one of the question's
    4 passages of 80 tokens), the last turn an answer."""
    rng = random.Random(seed)
    rows, acts, index = [], [], []
    for q in range(questions):
        prompt = [rng.randrange(1000, 30000) for _ in range(int(0.4 * length))]
        queries = [[rng.randrange(1000, 30000) for _ in range(4)] for _ in range(3)]
        passages = [[rng.randrange(1000, 30000) for _ in range(80)] for _ in range(4)]
        for _ in range(episodes):
            ids, act = list(prompt), [0] * len(prompt)
            while len(ids) < length - 90:
                action = rng.choice(queries) + [rng.randrange(1000, 30000) for _ in range(2)]
                obs = rng.choice(passages)
                ids += action + obs
                act += [1] * len(action) + [0] * len(obs)
            ids += [7, 8, 9]
            act += [1, 1, 1]
            rows.append(ids)
            acts.append(act)
            index.append(q)
    L = max(map(len, rows))
    input_ids = torch.zeros(len(rows), L, dtype=torch.long)
    action = torch.zeros(len(rows), L, dtype=torch.long)
    for b, (ids, act) in enumerate(zip(rows, acts)):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        action[b, : len(act)] = torch.tensor(act)
    return input_ids, action, index


def unbounded(input_ids: torch.Tensor, action: torch.Tensor, index: list[int], similarity: float) -> int:
    """The rule before issue 48 (for the record): whole context states, ``ratio(rep, state)`` with
    ``autojunk`` off and no upper-bound filters, no same-episode exclusion; the number of groups."""
    states = anchor_states(input_ids, action, "context")
    exact, reps, n = {}, {}, 0
    for b, row in enumerate(states):
        for state in row:
            gid = exact.get((index[b], state))
            if gid is None:
                gid = next(
                    (
                        g
                        for rep, g in reps.get(index[b], ())
                        if difflib.SequenceMatcher(None, rep, state, autojunk=False).ratio() >= similarity
                    ),
                    None,
                )
            if gid is None:
                gid, n = n, n + 1
                reps.setdefault(index[b], []).append((state, gid))
            exact.setdefault((index[b], state), gid)
    return n


def count_groups(input_ids: torch.Tensor, action: torch.Tensor, index: list[int], **kw) -> int:
    """The number of step groups :func:`anchor_groups` forms with the options ``kw``."""
    return int(anchor_groups(input_ids, action, index, **kw).group.max()) + 1


def timed(fn, repeat: int = 3) -> tuple[float, int]:
    """The best of ``repeat`` wall times of ``fn()`` (the first call pays one-off costs) and its value."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        best = min(best, time.perf_counter() - t0)
    return best, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--similarity", type=float, default=0.9)
    ap.add_argument("--old-limit", type=int, default=256, help="run the unbounded rule only up to this many episodes")
    ap.add_argument("--out", default=str(ROOT / "bench/results/gigpo_similarity.json"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    cases = [(8, 4, 300), (32, 8, 300), (32, 8, 1000), (8, 32, 1000), (32, 32, 1000)]
    rows = []
    head = (
        f"{'questions x episodes':>21} {'tokens':>6} {'turns':>6} | {'exact s':>8} {'old s':>8} "
        f"{'default s':>9} {'no cap s':>8} {'obs s':>7} | groups exact/old/default/no cap/obs"
    )
    print(head)
    for q, g, length in cases:
        ids, act, index = batch(q, g, length)
        turns = int(sum(len(r) for r in anchor_states(ids, act, "observation")))
        groups = partial(count_groups, ids, act, index)
        t_exact, n_exact = timed(groups)
        old = timed(partial(unbounded, ids, act, index, a.similarity), 1) if q * g <= a.old_limit else (None, None)
        t_ctx, n_ctx = timed(partial(groups, similarity=a.similarity, window=256, max_compare=8))
        t_nocap, n_nocap = timed(partial(groups, similarity=a.similarity, window=256, max_compare=None))
        t_obs, n_obs = timed(partial(groups, similarity=a.similarity, anchor="observation", window=256, max_compare=8))
        row = {
            "questions": q,
            "episodes": g,
            "tokens": length,
            "turns": turns,
            "exact_s": t_exact,
            "old_s": old[0],
            "default_s": t_ctx,
            "window_no_cap_s": t_nocap,
            "observation_default_s": t_obs,
            "groups": {
                "exact": n_exact,
                "old": old[1],
                "default": n_ctx,
                "window_no_cap": n_nocap,
                "observation_default": n_obs,
            },
        }
        rows.append(row)
        fmt = lambda x: "skipped" if x is None else f"{x:.3f}"  # noqa: E731
        print(
            f"{f'{q} x {g}':>21} {length:>6} {turns:>6} | {t_exact:>8.3f} {fmt(old[0]):>8} {t_ctx:>9.3f} "
            f"{t_nocap:>8.3f} {t_obs:>7.3f} | {n_exact}/{old[1]}/{n_ctx}/{n_nocap}/{n_obs}",
            flush=True,
        )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"similarity": a.similarity, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
