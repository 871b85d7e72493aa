"""Where a trainer step's questions come from (``train.questions``).

* ``dataset``: the train split, searched through the built index (the environment the stages
  load). SFT demonstrations are drawn from the same split, so a reward on them can be earned by
  remembering a demonstrated answer instead of reading.
* ``fresh``: a stream of freshly generated worlds (:mod:`agentr1.data.fresh`): world
  ``k = (step - 1) // train.fresh.every`` serves steps ``k * every + 1 .. (k + 1) * every``. Its
  passages are added to the dataset's corpus (``with_corpus``: the search keeps the dataset's
  passages as distractors, as at evaluation) in a retriever of ``retrieval.backend`` built in
  memory for that world, and the ToolEnv of ``env.*`` searches it. Nothing about a fresh entity
  exists anywhere else, so the reward pays for reading only.

A source is a function of ``(seed, step)`` alone (the world's seed is the run's seed), so a
resumed run and an uninterrupted one see the same questions. The last world is cached (a step
never asks for an earlier one). Whether a world can be generated is decided by its seed too (a
small world may lack the names or chains some draw asks for), so :meth:`FreshWorlds.check` draws
every world a run of ``train.steps`` will ask for before step 1 (~16 ms each): a run that could
never finish is refused at its start, not at the step that meets the world.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)


class FreshWorlds:
    """The ``fresh`` source (module docstring): ``at(step)`` is ``(env, questions)`` of the step's world."""

    def __init__(
        self, synthetic_cfg, fresh_cfg, retrieval_cfg, env_cfg, corpus: Sequence[Mapping[str, Any]], seed: int
    ) -> None:
        self.synthetic_cfg, self.fresh_cfg = synthetic_cfg, fresh_cfg
        self.retrieval_cfg, self.env_cfg, self.seed = retrieval_cfg, env_cfg, seed
        self.corpus = list(corpus)
        self.taken = frozenset(str(p["title"]) for p in self.corpus)
        self._cached: tuple[int, Any, list[dict]] | None = None

    def world_index(self, step: int) -> int:
        return (max(step, 1) - 1) // self.fresh_cfg.every

    def check(self, steps: int) -> None:
        """:class:`ValueError` naming the first world (and the step that asks for it) among those
        steps ``1..steps`` draw that cannot be generated, with the params to change."""
        from agentr1.data.fresh import make_world

        f = self.fresh_cfg
        for k in range(self.world_index(steps) + 1):
            try:
                make_world(self.synthetic_cfg, k, f.families, f.questions, self.seed, self.taken)
            except ValueError as exc:
                raise ValueError(
                    f"train.fresh: world {k} of this run's stream (seed {self.seed}), which step "
                    f"{k * f.every + 1} trains on, cannot be generated: {exc}. Nothing was trained "
                    f"(every world of train.steps={steps} is drawn before step 1)"
                ) from None

    def at(self, step: int) -> tuple[Any, list[dict]]:
        """The ToolEnv over world ``world_index(step)`` (with the dataset's passages when
        ``with_corpus``) and that world's questions."""
        k = self.world_index(step)
        if self._cached is None or self._cached[0] != k:
            from agentr1.data.fresh import make_world
            from agentr1.env.load import corpus_env

            f = self.fresh_cfg
            world = make_world(self.synthetic_cfg, k, f.families, f.questions, self.seed, self.taken)
            rows = (self.corpus + world.corpus) if f.with_corpus else world.corpus
            env = corpus_env(self.env_cfg, self.retrieval_cfg, rows, self.seed)
            self._cached = (k, env, world.questions)
            log.debug("fresh world %d: %d passages, %d questions", k, len(world.corpus), len(world.questions))
        return self._cached[1], self._cached[2]
