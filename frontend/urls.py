from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from frontend.views import (
    allocations,
    approvals,
    audit,
    auth,
    changes,
    fair_share,
    idle,
    platform,
    utilisation,
    windows,
)
from tenants.oidc.views import OidcCallbackView, OidcLoginView

urlpatterns: list[URLPattern | URLResolver] = [
    path("", allocations.dashboard, name="home"),
    path("login/", auth.LoginView.as_view(), name="login"),
    path("logout/", auth.LogoutView.as_view(), name="logout"),
    path("oidc/login/", OidcLoginView.as_view(), name="oidc-login"),
    path("oidc/callback/", OidcCallbackView.as_view(), name="oidc-callback"),
    path("allocations/new/", allocations.allocation_new, name="allocation-new"),
    path("allocations/new/feedback/", allocations.allocation_feedback, name="allocation-feedback"),
    path("allocations/<int:allocation_id>/", allocations.allocation_detail, name="allocation-detail"),
    path("allocations/<int:allocation_id>/release/", allocations.allocation_release_view, name="allocation-release"),
    path("allocations/<int:allocation_id>/renew/", changes.allocation_renew_view, name="allocation-renew"),
    path("allocations/<int:allocation_id>/resize/", changes.allocation_resize_view, name="allocation-resize"),
    path("changes/<int:change_id>/cancel/", changes.change_cancel, name="change-cancel"),
    path("changes/<int:change_id>/decide/", changes.change_decide, name="change-decide"),
    path("approvals/", approvals.approvals, name="approvals"),
    path("usage/", approvals.department_usage, name="department-usage"),
    path("utilisation/", utilisation.utilisation, name="utilisation"),
    path("idle/", idle.idle_cases, name="idle-cases"),
    path("idle/<int:case_id>/keep/", idle.idle_case_act, {"action": "keep"}, name="idle-case-keep"),
    path("idle/<int:case_id>/exempt/", idle.idle_case_act, {"action": "exempt"}, name="idle-case-exempt"),
    path("idle/<int:case_id>/release/", idle.idle_case_act, {"action": "release"}, name="idle-case-release"),
    path("fair-share/", fair_share.fair_share, name="fair-share"),
    path("calendar/", windows.quota_calendar_index, name="quota-calendar-index"),
    path("calendar/<int:department_id>/", windows.quota_calendar, name="quota-calendar"),
    path("calendar/<int:department_id>/windows/", windows.quota_window_new, name="quota-window-new"),
    path("quota-windows/<int:window_id>/decide/", windows.quota_window_decide, name="quota-window-decide"),
    path("quota-windows/<int:window_id>/cancel/", windows.quota_window_cancel_view, name="quota-window-cancel"),
    path("platform/clusters/", platform.clusters, name="clusters"),
    path("platform/clusters/<int:cluster_id>/", platform.cluster_detail, name="cluster-detail"),
    path("platform/clusters/<int:cluster_id>/defrag/", platform.cluster_defrag, name="cluster-defrag"),
    path("platform/catalogue/", platform.catalogue, name="catalogue"),
    path("audit/", audit.audit_log, name="audit-log"),
    path("audit/verify/", audit.audit_verify, name="audit-verify"),
    path("audit/export/", audit.audit_export_download, name="audit-export"),
    path("audit/checkpoint/", audit.audit_checkpoint, name="audit-checkpoint"),
]
