"""drf-spectacular runs while the portal serves (each API view's first check of its query parameters,
``kernel.api.schema.documented``, and ``GET /api/schema/``), on gunicorn's threads, and it is not
safe on two threads at once: ``kernel.api.schema.SCHEMA_LOCK`` keeps them apart.

The race is made to happen in a set order, not hoped for: a view extension whose target's module is
not installed (drf-spectacular ships several: ``dj_rest_auth``, ``knox``…) is resolved on its first
use by importing the target, and a failed import writes None over the target's name. The first
thread is held inside that import until the second has had the chance to start its own; the first
then fails and finishes, and only then the second."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.test import Client
from django.urls import resolve
from django.utils.module_loading import import_string
from drf_spectacular import plumbing
from drf_spectacular.extensions import OpenApiViewExtension
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIRequestFactory

from kernel.api import schema as schema_module
from kernel.api.schema import SCHEMA_LOCK, documented

MISSING = "no_such_package_installed.views.LoginView"
STEP_SECONDS = 10.0


def _view_for(url: str) -> tuple[Any, Any]:
    match = resolve(url)
    django_request = APIRequestFactory().get(url)
    django_request.resolver_match = match
    view = match.func.view_class(**match.func.view_initkwargs)  # type: ignore[attr-defined]
    request = view.initialize_request(django_request, **match.kwargs)
    view.request, view.kwargs = request, match.kwargs
    return view, request


class _Ordered:
    """The import of ``MISSING`` held on each named thread until the test lets that thread go."""

    def __init__(self) -> None:
        self.entered = {name: threading.Event() for name in ("first", "second")}
        self.go = {name: threading.Event() for name in ("first", "second")}
        self.real = import_string

    def import_string(self, dotted: str) -> Any:
        if dotted == MISSING:
            name = threading.current_thread().name
            self.entered[name].set()
            self.go[name].wait(timeout=STEP_SECONDS)
        return self.real(dotted)


def test_two_threads_checking_query_parameters_at_once_never_see_an_extension_half_resolved(monkeypatch: Any) -> None:
    monkeypatch.setattr(schema_module, "_documented", {})  # both views checked for the first time
    ordered = _Ordered()
    monkeypatch.setattr(plumbing, "import_string", ordered.import_string)

    class MissingLoginView(OpenApiViewExtension):  # type: ignore[no-untyped-call]
        target_class = MISSING

        def view_replacement(self) -> Any:
            return self.target

    outcomes: dict[str, str] = {}

    def check(url: str) -> None:
        try:
            view, request = _view_for(url)
            documented(view, request)
            outcomes[threading.current_thread().name] = "answered"
        except Exception as error:  # noqa: BLE001 - the failure is what the test looks for
            outcomes[threading.current_thread().name] = repr(error)

    first = threading.Thread(name="first", target=check, args=("/api/v1/allocations/",))
    second = threading.Thread(name="second", target=check, args=("/api/v1/flavors/",))
    try:
        first.start()
        assert ordered.entered["first"].wait(STEP_SECONDS), "the first thread never resolved the extension"
        second.start()
        reached = ordered.entered["second"].wait(0.5)  # without the lock it gets into the same import
        ordered.go["first"].set()
        first.join(STEP_SECONDS)
        ordered.go["second"].set()
        second.join(STEP_SECONDS)
    finally:
        ordered.go["first"].set()
        ordered.go["second"].set()
        OpenApiViewExtension._registry.remove(MissingLoginView)
    assert not first.is_alive() and not second.is_alive()
    assert outcomes == {"first": "answered", "second": "answered"}
    assert not reached, "the second thread resolved the extension while the first was still resolving it"
    assert MissingLoginView.target_class is None  # resolved once: its package is not installed


@pytest.mark.django_db
def test_the_schema_is_generated_under_the_lock(monkeypatch: Any) -> None:
    held: list[bool] = []
    real = SchemaGenerator.get_schema

    def watched(self: Any, *args: Any, **kwargs: Any) -> Any:
        held.append(SCHEMA_LOCK._is_owned())  # type: ignore[attr-defined]
        return real(self, *args, **kwargs)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(SchemaGenerator, "get_schema", watched)
    answer = Client().get("/api/schema/?format=json")
    assert answer.status_code == 200
    assert held == [True]
