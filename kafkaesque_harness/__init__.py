"""Kafkaesque's one import namespace: every package of the project is `kafkaesque_harness.<room>`.

The repository keeps the rooms as top-level folders (history/, checkers/, clusters/, workloads/,
nemesis/, results/, harness/); pyproject.toml maps each folder under this name, so an installed
wheel puts nothing of ours at the top of site-packages but this package. This file imports
nothing of ours: the nodes run `python -m kafkaesque_harness.clusters.broker` with only clusters/ beside it.

A copy of the node code (a mutant's, `--node-code`) is a directory holding `kafkaesque_harness/`
with its own clusters/; put first on the path, its rooms come before the installed ones, and
extend_path lets whatever the copy lacks come from the installed package.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
