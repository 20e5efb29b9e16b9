"""Routes under ``/api/v1/`` (included by ``gpuportal.api_urls``)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from accounting import apis, statement_apis
from accounting.idle import apis as idle_apis

urlpatterns: list[URLPattern | URLResolver] = [
    path("usage/", apis.UsageApi.as_view(), name="api-usage"),
    path("rate-cards/", statement_apis.RateCardListApi.as_view(), name="api-rate-cards"),
    path("rate-cards/<int:rate_card_id>/", statement_apis.RateCardDetailApi.as_view(), name="api-rate-card"),
    path("rate-cards/<int:rate_card_id>/end/", statement_apis.RateCardEndApi.as_view(), name="api-rate-card-end"),
    path("statements/", statement_apis.StatementListApi.as_view(), name="api-statements"),
    path("statements/preview/", statement_apis.StatementPreviewApi.as_view(), name="api-statement-preview"),
    path("statements/<int:statement_id>/", statement_apis.StatementDetailApi.as_view(), name="api-statement"),
    path(
        "statements/<int:statement_id>/lines.csv",
        statement_apis.StatementLinesCsvApi.as_view(),
        name="api-statement-lines-csv",
    ),
    path(
        "statements/<int:statement_id>/corrections/",
        statement_apis.StatementCorrectApi.as_view(),
        name="api-statement-corrections",
    ),
    path("idle-policies/", idle_apis.PolicyListApi.as_view(), name="api-idle-policies"),
    path("idle-policies/<int:policy_id>/", idle_apis.PolicyDetailApi.as_view(), name="api-idle-policy"),
    path("idle-cases/", idle_apis.CaseListApi.as_view(), name="api-idle-cases"),
    path("idle-cases/<int:case_id>/", idle_apis.CaseDetailApi.as_view(), name="api-idle-case"),
    path("idle-cases/<int:case_id>/keep/", idle_apis.CaseKeepApi.as_view(), name="api-idle-case-keep"),
    path("idle-cases/<int:case_id>/exempt/", idle_apis.CaseExemptApi.as_view(), name="api-idle-case-exempt"),
    path("idle-cases/<int:case_id>/release/", idle_apis.CaseReleaseApi.as_view(), name="api-idle-case-release"),
]
