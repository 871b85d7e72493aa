"""A plug-in package for agentr1, installed separately (tests/test_plugins.py): an advantage
estimator, a tool and a dataset loader, declared by the entry points in ``../entry_points.txt``
(what ``[project.entry-points."agentr1.*"]`` in its own pyproject.toml would install).

This module is the light one: the estimator's declaration, whose metadata config validation reads
without importing :mod:`.estimator` (torch). The tool (:mod:`.echo`) and the loader (:mod:`.trivia`)
import no torch, so their entry points name them directly.
"""

from agentr1.registry import Plugin

CENTERED = Plugin("agentr1_testplugin.estimator:centered", grouped=True, label="Centered")
