"""Routes of the delivery API; ``gpuportal.api_urls`` mounts them at ``/api/v1/``."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from delivery import apis, manifest_apis, pending_pod_apis, usage_guide_apis

urlpatterns: list[URLPattern | URLResolver] = [
    path("clusters/<int:cluster_id>/", apis.ClusterDetailApi.as_view(), name="api-cluster"),
    path("nodes/<int:node_id>/", apis.NodeDetailApi.as_view(), name="api-node"),
    path("clusters/<int:cluster_id>/sync/", apis.ClusterSyncApi.as_view(), name="api-cluster-sync"),
    path("clusters/<int:cluster_id>/discover/", apis.ClusterDiscoverApi.as_view(), name="api-cluster-discover"),
    path("clusters/<int:cluster_id>/manifests/", manifest_apis.ClusterManifestsApi.as_view(), name="api-cluster-manifests"),
    path("allocations/<int:allocation_id>/usage-guide/", usage_guide_apis.AllocationUsageGuideApi.as_view(),
         name="api-allocation-usage-guide"),
    path("allocations/<int:allocation_id>/pods/", pending_pod_apis.AllocationPendingPodsApi.as_view(), name="api-allocation-pods"),
]
