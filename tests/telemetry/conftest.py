from __future__ import annotations

from tests.telemetry.fixtures import agent, issue_token  # noqa: F401 (fixtures)
