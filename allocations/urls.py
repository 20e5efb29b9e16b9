"""Routes of the allocations API; ``gpuportal.api_urls`` mounts them at ``/api/v1/``."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from allocations.api import catalogue as catalog_apis
from allocations.api import changes as change_apis
from allocations.api import fair_share as fair_share_apis
from allocations.api import grants as apis
from allocations.api import preview as preview_apis
from allocations.api import project_caps as project_cap_apis
from allocations.api import rule_changes as rule_change_apis
from allocations.api import sharing as sharing_apis
from allocations.api import why as why_apis
from allocations.api import window_shrinks as window_shrink_apis
from allocations.api import windows as window_apis

urlpatterns: list[URLPattern | URLResolver] = [
    path("flavors/", apis.FlavorListApi.as_view(), name="api-flavors"),
    path("flavors/<int:flavor_id>/", apis.FlavorDetailApi.as_view(), name="api-flavor"),
    path("sharing-modes/", sharing_apis.SharingModeListApi.as_view(), name="api-sharing-modes"),
    path("priority-classes/", catalog_apis.PriorityClassListApi.as_view(), name="api-priority-classes"),
    path(
        "priority-classes/<int:priority_class_id>/",
        catalog_apis.PriorityClassDetailApi.as_view(),
        name="api-priority-class",
    ),
    path("rule-changes/", rule_change_apis.RuleChangeListApi.as_view(), name="api-rule-changes"),
    path("rule-changes/<int:change_id>/", rule_change_apis.RuleChangeDetailApi.as_view(), name="api-rule-change"),
    path("rule-changes/<int:change_id>/approve/", rule_change_apis.RuleChangeApproveApi.as_view(),
         name="api-rule-change-approve"),
    path("rule-changes/<int:change_id>/reject/", rule_change_apis.RuleChangeRejectApi.as_view(),
         name="api-rule-change-reject"),
    path("rule-changes/<int:change_id>/withdraw/", rule_change_apis.RuleChangeWithdrawApi.as_view(),
         name="api-rule-change-withdraw"),
    path("quotas/", catalog_apis.QuotaListApi.as_view(), name="api-quotas"),
    path("quotas/<int:quota_id>/", catalog_apis.QuotaDetailApi.as_view(), name="api-quota"),
    path("quotas/<int:quota_id>/effective/", window_apis.QuotaEffectiveApi.as_view(), name="api-quota-effective"),
    path("quotas/<int:quota_id>/timeline/", window_apis.QuotaTimelineApi.as_view(), name="api-quota-timeline"),
    path("quota-windows/", window_apis.QuotaWindowListApi.as_view(), name="api-quota-windows"),
    path("quota-windows/shrinks/", window_shrink_apis.QuotaWindowShrinksApi.as_view(), name="api-quota-window-shrinks"),
    path("quota-windows/<int:window_id>/", window_apis.QuotaWindowDetailApi.as_view(), name="api-quota-window"),
    path("quota-windows/<int:window_id>/approve/", window_apis.QuotaWindowApproveApi.as_view(),
         name="api-quota-window-approve"),
    path("quota-windows/<int:window_id>/reject/", window_apis.QuotaWindowRejectApi.as_view(),
         name="api-quota-window-reject"),
    path("quota-windows/<int:window_id>/cancel/", window_apis.QuotaWindowCancelApi.as_view(),
         name="api-quota-window-cancel"),
    path("allocations/", apis.AllocationListApi.as_view(), name="api-allocations"),
    path("allocations/<int:allocation_id>/", apis.AllocationDetailApi.as_view(), name="api-allocation"),
    path("allocations/<int:allocation_id>/approve/", apis.AllocationApproveApi.as_view(), name="api-allocation-approve"),
    path("allocations/<int:allocation_id>/reject/", apis.AllocationRejectApi.as_view(), name="api-allocation-reject"),
    path("allocations/<int:allocation_id>/release/", apis.AllocationReleaseApi.as_view(), name="api-allocation-release"),
    path("allocations/<int:allocation_id>/renew/", change_apis.AllocationRenewApi.as_view(), name="api-allocation-renew"),
    path("allocations/<int:allocation_id>/resize/", change_apis.AllocationResizeApi.as_view(), name="api-allocation-resize"),
    path("allocations/<int:allocation_id>/retry/", apis.AllocationRetryApi.as_view(), name="api-allocation-retry"),
    path("allocation-changes/", change_apis.AllocationChangeListApi.as_view(), name="api-allocation-changes"),
    path("allocation-changes/<int:change_id>/", change_apis.AllocationChangeDetailApi.as_view(), name="api-allocation-change"),
    path("allocation-changes/<int:change_id>/approve/", change_apis.AllocationChangeApproveApi.as_view(),
         name="api-allocation-change-approve"),
    path("allocation-changes/<int:change_id>/reject/", change_apis.AllocationChangeRejectApi.as_view(),
         name="api-allocation-change-reject"),
    path("allocation-changes/<int:change_id>/cancel/", change_apis.AllocationChangeCancelApi.as_view(),
         name="api-allocation-change-cancel"),
    path("allocations/preview/", preview_apis.AllocationRequestPreviewApi.as_view(), name="api-allocation-request-preview"),
    path("allocations/simulate/", why_apis.AllocationSimulateApi.as_view(), name="api-allocation-simulate"),
    path("allocations/<int:allocation_id>/why/", why_apis.AllocationWhyApi.as_view(), name="api-allocation-why"),
    path("allocations/<int:allocation_id>/placement-preview/", preview_apis.AllocationPlacementPreviewApi.as_view(),
         name="api-allocation-placement-preview"),
    path("projects/<int:project_id>/quotas/", project_cap_apis.ProjectCapsApi.as_view(), name="api-project-quotas"),
    path("fair-share/", fair_share_apis.FairShareApi.as_view(), name="api-fair-share"),
    path("fair-share/<int:department_id>/", fair_share_apis.FairShareDepartmentApi.as_view(),
         name="api-fair-share-department"),
]
