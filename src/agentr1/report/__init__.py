"""Stage ``report``: Table 3/4 analogues, breakdowns, plots and a generated summary.

``methods`` groups named runs into methods (seeds) and ablations, ``inputs`` reads the evaluate
and train outputs, ``stats`` holds the bootstrap intervals, ``tables``/``summary``/``plots`` render,
the stage itself is :mod:`agentr1.stages.report` (``agentr1 report``).
"""

from agentr1.report.methods import Method, group_methods

__all__ = ["Method", "group_methods"]
