"""Routes of the tenants API; ``gpuportal.api_urls`` mounts them at ``/api/v1/``."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from tenants import apis, self_service_apis
from tenants.auth_apis import SigninUnlockApi, TokenObtainApi
from tenants.group_mapping_apis import GroupMappingDetailApi, GroupMappingListApi
from tenants.token_apis import AccessTokenClaimApi, AccessTokenDetailApi, AccessTokenListApi

urlpatterns: list[URLPattern | URLResolver] = [
    path("auth/token/", TokenObtainApi.as_view(), name="api-token"),
    path("auth/tokens/", AccessTokenListApi.as_view(), name="api-access-tokens"),
    path("auth/tokens/<int:token_id>/", AccessTokenDetailApi.as_view(), name="api-access-token"),
    path("auth/tokens/<int:token_id>/claim/", AccessTokenClaimApi.as_view(), name="api-access-token-claim"),
    path("auth/unlock/", SigninUnlockApi.as_view(), name="api-auth-unlock"),
    path("me/", apis.MeApi.as_view(), name="api-me"),
    path("group-mappings/", GroupMappingListApi.as_view(), name="api-group-mappings"),
    path("group-mappings/<int:mapping_id>/", GroupMappingDetailApi.as_view(), name="api-group-mapping"),
    path("departments/", apis.DepartmentListApi.as_view(), name="api-departments"),
    path("departments/<int:department_id>/", apis.DepartmentDetailApi.as_view(), name="api-department"),
    path("projects/", apis.ProjectListApi.as_view(), name="api-projects"),
    path("projects/<int:project_id>/", apis.ProjectDetailApi.as_view(), name="api-project"),
    path("departments/<int:department_id>/members/", self_service_apis.DepartmentMemberListApi.as_view(),
         name="api-department-members"),
    path("departments/<int:department_id>/members/<int:membership_id>/",
         self_service_apis.DepartmentMemberDetailApi.as_view(), name="api-department-member"),
    path("projects/<int:project_id>/members/", self_service_apis.ProjectMemberListApi.as_view(),
         name="api-project-members"),
    path("projects/<int:project_id>/members/<int:user_id>/", self_service_apis.ProjectMemberDetailApi.as_view(),
         name="api-project-member"),
]
