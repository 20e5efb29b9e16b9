from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from clusters.models import Gpu, Node
from telemetry.models import NodeToken
from tests.conftest import World
from tests.custody.scene import NODE, Agent
from tests.telemetry.fixtures import agent, issue_token  # noqa: F401 (fixtures)


@pytest.fixture
def node_agent(world: World, issue_token: Callable[..., tuple[NodeToken, str]]) -> Agent:  # noqa: F811
    """The agent of the World's node h100-0, its GPUs named by the recording's UUIDs."""
    _, token = issue_token(NODE)
    reporter = Agent(client=APIClient(), token=token)
    node = Node.objects.get(cluster=world.cluster, name=NODE)
    for index in range(8):
        Gpu.objects.filter(node=node, index=index).update(uuid=reporter.gpu(index))
    return reporter
