"""Routes of the clusters API; ``gpuportal.api_urls`` mounts them at ``/api/v1/``."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from clusters import apis

# clusters/<id>/ and nodes/<id>/ (read here, changed through delivery) are routed in delivery.urls.

urlpatterns: list[URLPattern | URLResolver] = [
    path("clusters/", apis.ClusterListApi.as_view(), name="api-clusters"),
    path("clusters/<int:cluster_id>/kubeconfig/", apis.ClusterKubeconfigApi.as_view(), name="api-cluster-kubeconfig"),
    path("clusters/<int:cluster_id>/drift/", apis.ClusterDriftListApi.as_view(), name="api-cluster-drift"),
    path("clusters/<int:cluster_id>/pushes/", apis.ClusterPushListApi.as_view(), name="api-cluster-pushes"),
    path("nodes/", apis.NodeListApi.as_view(), name="api-nodes"),
]
