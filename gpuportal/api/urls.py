from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path

from allocations import apis as allocation_apis
from clusters import apis as cluster_apis
from gpuportal.api.auth import TokenObtainApi
from tenants import apis as tenant_apis

urlpatterns: list[URLPattern | URLResolver] = [
    path("auth/token/", TokenObtainApi.as_view(), name="api-token"),
    path("me/", tenant_apis.MeApi.as_view(), name="api-me"),
    path("departments/", tenant_apis.DepartmentListApi.as_view(), name="api-departments"),
    path("departments/<int:department_id>/", tenant_apis.DepartmentDetailApi.as_view(), name="api-department"),
    path("projects/", tenant_apis.ProjectListApi.as_view(), name="api-projects"),
    path("projects/<int:project_id>/", tenant_apis.ProjectDetailApi.as_view(), name="api-project"),
    path("flavors/", allocation_apis.FlavorListApi.as_view(), name="api-flavors"),
    path("flavors/<int:flavor_id>/", allocation_apis.FlavorDetailApi.as_view(), name="api-flavor"),
    path("priority-classes/", allocation_apis.PriorityClassListApi.as_view(), name="api-priority-classes"),
    path(
        "priority-classes/<int:priority_class_id>/",
        allocation_apis.PriorityClassDetailApi.as_view(),
        name="api-priority-class",
    ),
    path("quotas/", allocation_apis.QuotaListApi.as_view(), name="api-quotas"),
    path("quotas/<int:quota_id>/", allocation_apis.QuotaDetailApi.as_view(), name="api-quota"),
    path("allocations/", allocation_apis.AllocationListApi.as_view(), name="api-allocations"),
    path("allocations/<int:allocation_id>/", allocation_apis.AllocationDetailApi.as_view(), name="api-allocation"),
    path("allocations/<int:allocation_id>/approve/", allocation_apis.AllocationApproveApi.as_view(), name="api-allocation-approve"),
    path("allocations/<int:allocation_id>/reject/", allocation_apis.AllocationRejectApi.as_view(), name="api-allocation-reject"),
    path("allocations/<int:allocation_id>/release/", allocation_apis.AllocationReleaseApi.as_view(), name="api-allocation-release"),
    path("allocations/<int:allocation_id>/renew/", allocation_apis.AllocationRenewApi.as_view(), name="api-allocation-renew"),
    path("allocations/<int:allocation_id>/retry/", allocation_apis.AllocationRetryApi.as_view(), name="api-allocation-retry"),
    path("allocations/<int:allocation_id>/placement-preview/", allocation_apis.AllocationPlacementPreviewApi.as_view(),
         name="api-allocation-placement-preview"),
    path("clusters/", cluster_apis.ClusterListApi.as_view(), name="api-clusters"),
    path("clusters/<int:cluster_id>/", cluster_apis.ClusterDetailApi.as_view(), name="api-cluster"),
    path("clusters/<int:cluster_id>/kubeconfig/", cluster_apis.ClusterKubeconfigApi.as_view(), name="api-cluster-kubeconfig"),
    path("clusters/<int:cluster_id>/sync/", cluster_apis.ClusterSyncApi.as_view(), name="api-cluster-sync"),
    path("clusters/<int:cluster_id>/discover/", cluster_apis.ClusterDiscoverApi.as_view(), name="api-cluster-discover"),
    path("clusters/<int:cluster_id>/drift/", cluster_apis.ClusterDriftListApi.as_view(), name="api-cluster-drift"),
    path("clusters/<int:cluster_id>/pushes/", cluster_apis.ClusterPushListApi.as_view(), name="api-cluster-pushes"),
    path("nodes/", cluster_apis.NodeListApi.as_view(), name="api-nodes"),
    path("nodes/<int:node_id>/", cluster_apis.NodeDetailApi.as_view(), name="api-node"),
    path("audit/", include("audit.urls")),
    path("", include("clusters.telemetry.urls")),
]
