"""The auditor's custody page answers for the history, links the downloads, and is closed to others."""

from __future__ import annotations

from django.test import Client

from tests.conftest import World
from tests.custody.scene import Agent, h100_grant, pod_device


def _client(world: World, persona: str) -> Client:
    client = Client()
    client.force_login(world.users[persona])
    return client


def test_the_auditor_reads_who_held_the_gpu_and_downloads_it(world: World, node_agent: Agent) -> None:
    allocation = h100_grant(world)
    gpu = node_agent.gpu(allocation.reservations.get().gpu_indices[0])
    node_agent.report([pod_device("vision-seg", "train-a", gpu)])
    node_agent.report([])
    page = _client(world, "auditor").get("/audit/custody/", {"device": gpu})
    text = page.content.decode()
    assert page.status_code == 200 and "vision-seg/train-a" in text and f"#{allocation.pk}" in text
    assert "GPU custody" in text  # in the menu
    download = _client(world, "auditor").get("/audit/custody/export/", {"device": gpu, "output": "csv"})
    assert download.status_code == 200 and "train-a" in download.content.decode()


def test_a_researcher_may_not_read_custody(world: World) -> None:
    assert _client(world, "nlp_member").get("/audit/custody/").status_code == 403
    assert _client(world, "nlp_member").get("/audit/custody/export/", {"device": "x", "output": "csv"}).status_code == 403


def test_an_empty_question_asks_for_a_subject(world: World) -> None:
    page = _client(world, "auditor").get("/audit/custody/", {"start": "2026-12-01T00:00"})
    assert page.status_code == 200 and "Answer (" not in page.content.decode()
