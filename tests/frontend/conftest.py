"""Fixtures for the portal's view tests: logged-in Django test clients per persona."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation
from tests.conftest import World

Login = Callable[[str | None], Client]


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    """Login throttling and the last verification live in the cache: start every test without them."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def login(world: World) -> Login:
    def client_for(persona: str | None) -> Client:
        client = Client()
        if persona is not None:
            client.force_login(world.users[persona])
        return client

    return client_for


def pending(world: World, *, persona: str = "nlp_member", quantity: int = 1, project: str = "llm",
            flavor: str = "a100") -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=getattr(world, flavor),
        quantity=quantity, priority_class=world.standard, starts_at=start,
        ends_at=start + datetime.timedelta(days=3), justification="portal tests",
    )
