"""The command tree: the root command with every command group attached, and the entry point."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cli.app import add_commands, root
from cli.commands import allocations, approvals, audit, auth, custody, meta, quotas, requests, whatif, why

add_commands(root, [
    *auth.COMMANDS, *requests.COMMANDS, *allocations.COMMANDS, *approvals.COMMANDS, *quotas.COMMANDS,
    *audit.COMMANDS, *custody.COMMANDS, *whatif.COMMANDS, *meta.COMMANDS, *why.COMMANDS,
])

__all__ = ["main", "root"]


def main(argv: Sequence[str] | None = None) -> None:
    """``gpuportal`` (the console script) and ``python -m cli``."""
    root.main(args=list(argv) if argv is not None else sys.argv[1:], prog_name="gpuportal")
