from __future__ import annotations

from django.contrib import admin

from audit import actions
from audit.admin_base import AuditedAdmin
from tenants.models import Department, ExternalGroupMapping, Membership, Project
from tenants.signin import AdminSigninForm
from tenants.token_admin import PersonalAccessTokenAdmin  # noqa: F401 - registers the tokens' admin
from tenants.user_admin import AuditedUserAdmin  # noqa: F401 - registers the accounts' admin, audited


@admin.register(Department)
class DepartmentAdmin(AuditedAdmin):
    list_display = ["slug", "name", "parent"]
    search_fields = ["slug", "name"]
    audit_created = actions.DEPARTMENT_CREATED
    audit_updated = actions.DEPARTMENT_UPDATED

    def department_id_of(self, obj: Department) -> int | None:
        return obj.pk


@admin.register(Membership)
class MembershipAdmin(AuditedAdmin):
    list_display = ["user", "department", "role"]
    list_filter = ["role", "department"]
    audit_created = actions.MEMBERSHIP_GRANTED
    audit_updated = actions.MEMBERSHIP_CHANGED
    audit_deleted = actions.MEMBERSHIP_REVOKED


@admin.register(Project)
class ProjectAdmin(AuditedAdmin):
    list_display = ["slug", "name", "department"]
    list_filter = ["department"]
    search_fields = ["slug", "name"]
    filter_horizontal = ["members"]
    audit_created = actions.PROJECT_CREATED
    audit_updated = actions.PROJECT_UPDATED

@admin.register(ExternalGroupMapping)
class ExternalGroupMappingAdmin(AuditedAdmin):
    """Platform admins map identity-provider groups to department roles (also ``/api/v1/group-mappings/``)."""

    list_display = ["source", "external_group", "department", "role"]
    list_filter = ["source", "role", "department"]
    search_fields = ["external_group"]
    audit_created = actions.GROUP_MAPPING_CREATED
    audit_updated = actions.GROUP_MAPPING_UPDATED
    audit_deleted = actions.GROUP_MAPPING_DELETED


# The admin site's login checks passwords under the sign-in lockout, like the portal's and the API's.
admin.site.login_form = AdminSigninForm
