"""The what-if pages: the form asks for one through the service and shows the result per
department; the quota window's form offers "what would this have done last month"."""

from __future__ import annotations

import datetime
import html
import json
import re
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from allocations.models import Quota
from tests.conftest import World
from tests.whatifs.history import over_nlp_limit
from tests.whatifs.test_what_ifs import BOOKED_AHEAD, RAISE_NLP
from whatifs.models import WhatIf
from whatifs.services import what_if_create, what_if_run

pytestmark = pytest.mark.django_db


def client_of(world: World, persona: str) -> Client:
    client = Client()
    client.force_login(world.users[persona])
    return client


def test_a_department_admin_asks_for_a_what_if_and_reads_its_comparison(
        world: World, django_capture_on_commit_callbacks: Any) -> None:
    over_nlp_limit(world)
    client = client_of(world, "nlp_admin")
    page = client.get("/what-ifs/")
    assert page.status_code == 200 and b'id="what-if-form"' in page.content
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post("/what-ifs/", {"department": world.nlp.pk, "history_days": 7, "quota": quota.pk,
                                            "limit_delta": "4", "title": "raise nlp"})
    made = WhatIf.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"/what-ifs/{made.pk}/"
    shown = client.get(answer["Location"]).content.decode()
    assert made.changes == [{"kind": "quota", "quota": quota.pk, "limit_delta": "4"}]
    assert 'id="what-if-nlp"' in shown and 'id="what-if-vision"' in shown
    assert "<li>Quota nlp · GPU-equivalents: limit +4</li>" in shown  # the change in words, not JSON
    assert "Wait p99 (min)" in shown and "(better)" in shown
    assert 'id="wi-nlp-current"' in shown and 'id="wi-nlp-proposed"' in shown  # the charts, inline SVG
    held_back = re.search(r'<ul class="changes" id="what-if-held-back-nlp">(.*?)</ul>', shown, re.S)
    assert held_back is not None  # the words the replay stored: nlp's own limit held it back, then nothing
    assert "Current: nlp: waited 2,820 min at p95; nlp&#x27;s own limit bound 100 %" in held_back.group(1)
    assert "Proposed: nlp: no demand waited." in held_back.group(1)
    assert 'id="what-if-levels-nlp"' in shown and "acme&#x27;s limit" in shown
    assert 'id="what-if-booked-ahead"' not in shown  # none of the history's requests asked for a later start
    assert client_of(world, "vision_admin").get(answer["Location"]).status_code == 404


def test_the_page_says_how_many_requests_were_booked_ahead(world: World) -> None:
    made = what_if_create(actor=world.users["nlp_admin"], changes=RAISE_NLP,
                          workload="\n".join(json.dumps(line) for line in BOOKED_AHEAD))
    assert what_if_run(what_if_id=made.pk) is not None
    shown = client_of(world, "nlp_admin").get(f"/what-ifs/{made.pk}/").content.decode()
    said = re.search(r'<p id="what-if-booked-ahead">(.*?)</p>', shown, re.S)
    assert said is not None and said.group(1).startswith("1 of the requests asked for a later start than their "
                                                         "submission: both sides decide them at their submission")


def test_a_refused_change_is_shown_on_the_form_and_members_get_403(world: World) -> None:
    client = client_of(world, "nlp_admin")
    vision = Quota.objects.get(department=world.vision, flavor=None)
    answer = client.post("/what-ifs/", {"department": world.nlp.pk, "history_days": 7, "quota": vision.pk,
                                        "limit_delta": "4"})
    assert answer.status_code == 400 and WhatIf.objects.count() == 0  # not among nlp's quotas
    json_changes = '[{"kind": "quota", "department": "vision", "limit_delta": 4}]'
    answer = client.post("/what-ifs/", {"department": world.nlp.pk, "history_days": 7, "changes_json": json_changes})
    assert answer.status_code == 400 and b"outside the departments you administer" in answer.content
    assert client_of(world, "nlp_member").get("/what-ifs/").status_code == 403


def test_the_quota_window_form_offers_what_it_would_have_done_last_month(world: World) -> None:
    client = client_of(world, "nlp_admin")
    calendar = client.get(f"/calendar/{world.nlp.pk}/").content.decode()
    assert 'id="window-what-if"' in calendar and 'formaction="/what-ifs/"' in calendar
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    begins = (timezone.now() + datetime.timedelta(days=10)).replace(second=0, microsecond=0)
    window = {"quota": str(quota.pk), "kind": "temporary", "timezone": "UTC", "limit_delta": "4", "shrink_policy": "reclaim",
              "begins_at": f"{begins:%Y-%m-%dT%H:%M}", "ends_at": f"{begins + datetime.timedelta(days=2):%Y-%m-%dT%H:%M}"}
    prefilled = client.get("/what-ifs/", window).content.decode()
    assert f'<option value="{quota.pk}" selected>' in prefilled and 'name="history_days" value="30"' in prefilled
    field = re.search(r'<textarea name="changes_json"[^>]*>([^<]*)</textarea>', prefilled)
    assert field is not None
    (change,) = json.loads(html.unescape(field.group(1)))
    moved = datetime.datetime.fromisoformat(change["begins_at"])
    assert change["kind"] == "window" and change["limit_delta"] == "4" and change["quota"] == quota.pk
    assert change["shrink_policy"] == "reclaim"  # the window's own, replayed as the portal would apply it
    assert (begins - moved) % datetime.timedelta(weeks=1) == datetime.timedelta(0)  # same weekday and hour
    assert timezone.now() - datetime.timedelta(days=30) <= moved < timezone.now()  # within the replayed month
    assert datetime.datetime.fromisoformat(change["ends_at"]) - moved == datetime.timedelta(days=2)
    answer = client.post("/what-ifs/", {"department": world.nlp.pk, "history_days": 30, "changes_json": html.unescape(field.group(1))})
    assert answer.status_code == 302 and WhatIf.objects.get().changes == [change]


def test_a_window_on_a_classs_share_asks_what_that_share_would_have_done(world: World) -> None:
    """The window form's class (its share of the quota) travels to the what-if by name."""
    client = client_of(world, "nlp_admin")
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    begins = (timezone.now() + datetime.timedelta(days=3)).replace(second=0, microsecond=0)
    window = {"quota": str(quota.pk), "kind": "temporary", "timezone": "UTC", "limit_delta": "-4",
              "priority_class": str(world.preemptible.pk), "begins_at": f"{begins:%Y-%m-%dT%H:%M}",
              "ends_at": f"{begins + datetime.timedelta(hours=6):%Y-%m-%dT%H:%M}"}
    prefilled = client.get("/what-ifs/", window).content.decode()
    field = re.search(r'<textarea name="changes_json"[^>]*>([^<]*)</textarea>', prefilled)
    assert field is not None
    (change,) = json.loads(html.unescape(field.group(1)))
    assert change["priority_class"] == "gpu-preemptible" and change["limit_delta"] == "-4"
    answer = client.post("/what-ifs/", {"department": world.nlp.pk, "history_days": 30, "changes_json": html.unescape(field.group(1))})
    assert answer.status_code == 302 and WhatIf.objects.get().changes == [change]


def test_a_flavors_quota_that_held_demand_back_is_named_on_the_page(
        world: World, django_capture_on_commit_callbacks: Any) -> None:
    """nlp's 12 A100s against its quota of 8 A100s: raising nlp's limit in GPU-equivalents lets
    nothing more in, and the page says which quota held it back (its A100s', not its own limit)."""
    over_nlp_limit(world)
    Quota.objects.filter(department=world.nlp, flavor=world.a100).update(limit=8)  # back to the test world's 8
    client = client_of(world, "nlp_admin")
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post("/what-ifs/", {"department": world.nlp.pk, "history_days": 7, "quota": quota.pk,
                                            "limit_delta": "4"})
    shown = html.unescape(client.get(answer["Location"]).content.decode())
    assert "Proposed: nlp: waited 2,820 min at p95; nlp's quota of a100 bound 100 %" in shown
    assert re.search(r"<th[^>]*>nlp's quota of a100</th>", shown)
