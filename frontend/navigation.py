"""The navigation: each person sees only the pages their roles allow."""

from __future__ import annotations

from dataclasses import dataclass

from tenants.access import Access

CATALOGUE_FORMS = (
    "catalogue-flavor-new", "catalogue-flavor-edit", "catalogue-quota-new", "catalogue-quota-edit",
    "catalogue-priority-class-new", "catalogue-priority-class-edit",
)


@dataclass(frozen=True)
class NavItem:
    label: str
    url_name: str
    # url names that belong to this section (marked as the current page in the navigation)
    section: tuple[str, ...]


def nav_items(*, access: Access, can_request: bool, is_staff: bool) -> list[NavItem]:
    items: list[NavItem] = []
    if access.has_any_role:
        items.append(NavItem("Dashboard", "home", ("home", "allocation-detail")))
    if access.is_platform_admin:
        items.append(NavItem("Overview", "platform-overview", ("platform-overview",)))
    if can_request:
        items.append(NavItem("Request GPUs", "allocation-new", ("allocation-new",)))
    if access.is_platform_admin or access.administered:
        items.append(NavItem("Approvals", "approvals", ("approvals",)))
        items.append(NavItem("Usage", "department-usage", ("department-usage",)))
        items.append(NavItem("Departments" if access.is_platform_admin else "Department", "departments",
                             ("departments", "department")))
        items.append(NavItem("What-ifs", "what-ifs", ("what-ifs", "what-if")))
    if access.has_any_role:
        items.append(NavItem("Utilisation", "utilisation", ("utilisation",)))
        items.append(NavItem("Idle grants", "idle-cases", ("idle-cases", "idle-case-keep", "idle-case-exempt", "idle-case-release")))
    if access.has_any_role:
        items.append(NavItem("Fair share", "fair-share", ("fair-share",)))
    if access.has_any_role:
        items.append(NavItem("Quota calendar", "quota-calendar-index",
                             ("quota-calendar-index", "quota-calendar", "quota-window-new")))
    if access.is_platform_admin:
        items.append(NavItem("Clusters", "clusters", ("clusters", "cluster-detail")))
        items.append(NavItem("Catalogue", "catalogue", ("catalogue", *CATALOGUE_FORMS)))
    if audit_page_visible(access):
        items.append(NavItem("Audit log", "audit-log", ("audit-log",)))
        items.append(NavItem("GPU custody", "custody", ("custody",)))
    if is_staff:
        items.append(NavItem("Django admin", "admin:index", ()))
    return items


def audit_page_visible(access: Access) -> bool:
    """Auditors and platform admins, and department admins for their own departments' events."""
    return access.is_platform_admin or bool(access.audited) or bool(access.administered)
