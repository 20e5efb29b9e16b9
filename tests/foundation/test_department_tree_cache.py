"""The department tree each access check reads is kept per process and read again only when the
tree changed: the stamp a trigger moves on every change of parent, whatever wrote it, and the
tree's signature (count, highest id, sum of stamps)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tenants.access import access_for, department_parent_map, department_tree_signature
from tenants.models import Department
from tests.conftest import World


@pytest.mark.django_db
def test_a_move_moves_the_stamp_whatever_wrote_it_and_nothing_else_does(world: World) -> None:
    stale = Department.objects.get(pk=world.speech.pk)  # read before the move
    before = department_tree_signature()
    Department.objects.filter(pk=world.speech.pk).update(parent=world.vision)  # a raw UPDATE: no save()
    moved = department_tree_signature()
    assert moved[2] == before[2] + 1 and moved[:2] == before[:2]

    stale.name = "Speech and audio"  # an ORM save writes back the stamp (and the parent) it read
    stale.save()
    speech = Department.objects.get(pk=world.speech.pk)
    assert speech.tree_stamp == 2  # the parent it wrote back is a move too; the stale stamp is not kept
    speech.name = "Speech"
    speech.save()
    assert Department.objects.get(pk=world.speech.pk).tree_stamp == 2  # a rename moves nothing

    added = Department.objects.create(slug="robotics", name="Robotics", parent=world.acme)
    assert department_tree_signature()[:2] == (moved[0] + 1, added.pk)
    added.delete()
    assert department_tree_signature()[0] == moved[0]


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_tree_is_read_once_and_again_after_any_change(
    transactional_db: None, django_assert_num_queries: Any
) -> None:
    from tests.conftest import build_world

    world = build_world()
    department_parent_map()  # whatever the process kept before: now this database's tree
    with django_assert_num_queries(1):  # the signature alone
        parents = department_parent_map()
    assert parents[world.speech.pk] == world.nlp.pk

    Department.objects.filter(pk=world.speech.pk).update(parent=world.vision)
    with CaptureQueriesContext(connection) as queries:
        assert department_parent_map()[world.speech.pk] == world.vision.pk
    assert len(queries) == 2  # the signature, then the parents again

    admin = world.users["vision_admin"]
    assert access_for(admin).can_administer_department(world.speech.pk)  # vision's admin now holds speech
    department_parent_map()[world.speech.pk] = world.acme.pk  # a caller's copy: the kept tree stays as it was
    assert department_parent_map()[world.speech.pk] == world.vision.pk
