"""The body of a submit (``POST /api/v1/allocations/``) read without building serializers when it
has the plain shape a JSON client sends, and through ``AllocationIn`` otherwise.

Building ``AllocationIn`` twice per request (once for the project the permission check is about,
once for the whole body) copies its eight fields each time and runs them through DRF's validation
machinery: about a millisecond of a submit's CPU on the busiest write path. The plain reading
accepts only what ``AllocationIn`` accepts and gives the same values, read with the same queries:
ids as JSON integers, the quantity as an integer within its bounds, times as strings parsed by
DRF's own ``DateTimeField``, a justification that is a non-blank string within the limit (trimmed,
as DRF trims it), no field the serializer does not take. Anything else, and every body with an
error, goes through ``AllocationIn`` (``target`` and ``validated``), so that a 400 names the
fields exactly as it always did.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import Model, QuerySet
from rest_framework import serializers
from rest_framework.request import Request

from allocations.catalogue import selectors
from allocations.models import PriorityClass
from clusters.selectors import cluster_list
from kernel.api.base import DB_INT_MAX, ScopedRelatedField, refuse_hostile_text, target, validated
from kernel.limits import QUANTITY_MAX, TEXT_LIMIT
from tenants.models import Project
from tenants.selectors import project_list_for_requester

TAKEN = frozenset(
    {"project", "flavor", "quantity", "priority_class", "cluster", "starts_at", "ends_at", "justification"}
)
"""The fields `AllocationIn` takes: a body with any other is read by the serializer (an unknown field is a 400)."""
REQUIRED = frozenset({"project", "flavor", "quantity", "ends_at", "justification"})
_TIME = serializers.DateTimeField()
"""The parser ``AllocationIn``'s times use (its formats and the current time zone)."""


def _default_priority_class(user: Any) -> PriorityClass | None:
    return selectors.priority_class_default(user=user)


class TargetProjectField(ScopedRelatedField):
    """The body's project; the one the view resolved for its permission check (``target``), passed
    in the context as ``project``, is taken as it is instead of being read a second time."""

    def to_internal_value(self, data: Any) -> Any:
        known = self.context.get("project")
        if known is not None and not isinstance(data, bool) and isinstance(data, (int, str)) and str(data) == str(known.pk):
            return known
        return super().to_internal_value(data)


class AllocationIn(serializers.Serializer):  # type: ignore[type-arg]
    project = TargetProjectField(scope=lambda user: project_list_for_requester(user=user))
    flavor = ScopedRelatedField(scope=lambda user: selectors.flavor_list(user=user))
    quantity = serializers.IntegerField(min_value=1, max_value=QUANTITY_MAX)
    priority_class = ScopedRelatedField(scope=lambda user: selectors.priority_class_list(user=user), required=False)
    cluster = ScopedRelatedField(scope=lambda user: cluster_list(user=user), required=False, allow_null=True, default=None)
    starts_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    ends_at = serializers.DateTimeField()
    justification = serializers.CharField(max_length=TEXT_LIMIT)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("priority_class") is None:
            fallback = _default_priority_class(self.context["request"].user)
            if fallback is None:
                raise serializers.ValidationError({"priority_class": ["This field is required."]})
            attrs["priority_class"] = fallback
        return attrs


class _NotPlain(Exception):
    """The body is not of the plain shape, or has an error: ``AllocationIn`` reads it."""


def submit_project(request: Request, user: User) -> Project:
    """The body's project, among those ``user`` may see, read with whether ``user`` is a member."""
    value = request.data.get("project") if type(request.data) is dict else None
    try:
        project: Project = _object(project_list_for_requester(user=user), value)
    except _NotPlain:
        return target(AllocationIn, request, "project")  # type: ignore[no-any-return]
    return project


def submit_body(request: Request, user: User, *, project: Project) -> dict[str, Any]:
    """The validated body (``project`` as the view resolved it), as ``validated(AllocationIn, …)``
    returns it."""
    refuse_hostile_text(request.data)
    try:
        return _plain(request.data, user, project=project)
    except _NotPlain:
        return validated(AllocationIn, request, project=project)


def _plain(data: Any, user: User, *, project: Project) -> dict[str, Any]:
    if type(data) is not dict or not data.keys() <= TAKEN or not REQUIRED <= data.keys():
        raise _NotPlain
    if type(data["project"]) is not int or data["project"] != project.pk:
        raise _NotPlain
    quantity = data["quantity"]
    if type(quantity) is not int or not 1 <= quantity <= QUANTITY_MAX:
        raise _NotPlain
    justification = data["justification"]
    if type(justification) is not str or not 0 < len(justification.strip()) <= TEXT_LIMIT:
        raise _NotPlain
    starts_at = data.get("starts_at")
    body = {
        "project": project,
        "flavor": _object(selectors.flavor_list(user=user), data["flavor"]),
        "quantity": quantity,
        "cluster": _object(cluster_list(user=user), data["cluster"]) if data.get("cluster") is not None else None,
        "starts_at": _time(starts_at) if starts_at is not None else None,
        "ends_at": _time(data["ends_at"]),
        "justification": justification.strip(),
    }
    if "priority_class" in data:
        body["priority_class"] = _object(selectors.priority_class_list(user=user), data["priority_class"])
    else:
        body["priority_class"] = selectors.priority_class_default(user=user)
        if body["priority_class"] is None:
            raise _NotPlain
    return body


def _object(scope: QuerySet[Any], value: Any) -> Any:
    """The object of id ``value`` in ``scope``, read as ``ScopedRelatedField`` reads it."""
    if type(value) is not int or not 1 <= value <= DB_INT_MAX:
        raise _NotPlain
    try:
        found: Model = scope.get(pk=value)
    except scope.model.DoesNotExist:
        raise _NotPlain from None
    return found


def _time(value: Any) -> Any:
    if type(value) is not str:
        raise _NotPlain
    try:
        return _TIME.to_internal_value(value)
    except serializers.ValidationError:
        raise _NotPlain from None
