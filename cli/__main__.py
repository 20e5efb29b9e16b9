"""``python -m cli``: the same as the ``gpuportal`` command."""

from __future__ import annotations

from cli.tree import main

if __name__ == "__main__":
    main()
