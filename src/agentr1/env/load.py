"""The ToolEnv of a config: :func:`load_env`, for the stages and the benchmarks alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentr1.errors import StageError

if TYPE_CHECKING:
    from agentr1.config import Config
    from agentr1.env import ToolEnv


def load_env(cfg: Config) -> ToolEnv:
    """The :class:`agentr1.env.ToolEnv` of ``env.*`` over the index ``agentr1 index`` built;
    :class:`StageError` saying to build it when it cannot be loaded."""
    from agentr1.env import ToolEnv
    from agentr1.retrieval.base import RetrieverError
    from agentr1.retrieval.factory import load_retriever

    try:
        retriever = load_retriever(cfg)
    except (RetrieverError, FileNotFoundError) as exc:
        raise StageError(f"cannot load the retriever ({exc}): run `agentr1 index` first") from None
    return ToolEnv.from_config(cfg.env, retriever)


def corpus_env(env_cfg, retrieval_cfg, corpus_rows, seed: int = 0) -> ToolEnv:
    """The :class:`agentr1.env.ToolEnv` of ``env_cfg`` over a retriever of ``retrieval_cfg.backend``
    built in memory over ``corpus_rows`` (``id, title, text``): the environment of a fresh world
    (:mod:`agentr1.data.fresh`), whose passages no built index holds."""
    from agentr1.env import ToolEnv
    from agentr1.retrieval.factory import build_retriever

    return ToolEnv.from_config(env_cfg, build_retriever(retrieval_cfg, corpus_rows, seed=seed))
