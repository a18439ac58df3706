# isort: skip_file
"""Command line: `cuba-memorys` with no command serves MCP on stdio; verbs for people and hooks.

Commands are thin: open the memory, call a service, print. ``app.main`` is the group; the
modules imported here register their verbs on it.
"""

from cuba_memorys.cli import _interrupt  # noqa: F401  (first: Ctrl-C during the imports below is one line)
from cuba_memorys.cli import _threads  # noqa: F401  (before numpy loads: sets the BLAS thread count)
from cuba_memorys.cli import commands, evaluate, graph, hooks, lifecycle, migrate, models  # noqa: F401  (register the verbs)
from cuba_memorys.cli import git_hooks, merge_driver, principals, projects, sync  # noqa: F401  (register the verbs)
from cuba_memorys.cli import exports  # noqa: F401  (register the verbs)
from cuba_memorys.cli import codegraph  # noqa: F401  (register the verbs)
from cuba_memorys.cli import anchors  # noqa: F401  (register the verbs)
from cuba_memorys.cli import compat  # noqa: F401  (register the verbs)
from cuba_memorys.cli.app import main

__all__ = ["main"]
