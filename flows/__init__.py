"""Prefect flows for agentr1: ``pipeline`` (dvc repro), ``sweep`` (dvc exp queue), ``promote``
(registry gate). They orchestrate DVC and the ``agentr1`` CLI as subprocesses and never
re-implement a stage; deployments live in ``prefect.yaml`` at the repository root."""
