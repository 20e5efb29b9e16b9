"""``gpuportal``: the command-line client of GPU Portal, over its REST API only.

It imports nothing of the portal and no Django (tests/architecture checks it), so it runs on any
machine with Python, Click, requests and PyYAML. docs/cli.md is its reference, generated from the
command tree (``python -m cli docs``).
"""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("gpuportal")
except metadata.PackageNotFoundError:  # run from a checkout that is not installed
    __version__ = "0.1.0"
