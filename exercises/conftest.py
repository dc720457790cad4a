"""Grading rules for ``pytest --nbval exercises/``.

An exercise passes when every cell runs without an error — the check cells raise when an answer is
wrong. Stored outputs are never compared here: your saved notebook has your own outputs (plots,
timings), and they are not what is graded. Grading reads the saved notebooks: save first (Ctrl+S).

* A cell gets 180 seconds unless ``--nbval-cell-timeout`` is given: a loop that never ends fails its
  cell instead of hanging the run (nbval's own default is 2000 s per cell); a kernel that dies fails
  its cell at once.
* ``# NBVAL_SKIP`` / ``# NBVAL_RAISES_EXCEPTION`` (or the matching tags) in a check cell are ignored:
  a check always runs and must pass.
* A task whose check cell was deleted, emptied, edited or marked to be skipped gets a failing test of its
  own that names the task and how to restore the cell. (``python -m ampcourse grade`` goes further: it
  runs the original checks from ``solutions/`` in their place.)

The rules live in :mod:`ampcourse.pytest_plugin`, which the course's environment loads on its own (a
``pytest11`` entry point): they hold without this file too. This file registers the plugin where that
entry point is not installed (a course older than it), never twice.
"""


def pytest_configure(config):
    from ampcourse import pytest_plugin

    if not config.pluginmanager.is_registered(pytest_plugin):
        config.pluginmanager.register(pytest_plugin, "ampcourse")
