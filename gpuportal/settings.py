"""Django settings, all taken from the environment (see the configuration table in README.md).

This is the one module that reads ``GPUPORTAL_*`` variables and gives them their defaults; the apps
read the result at call time through ``kernel.conf`` (their ``conf`` modules), never the environment.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from gpuportal.ldap_settings import ldap_settings
from gpuportal.packages import PORTAL_APPS
from gpuportal.periodic import beat_schedule
from gpuportal.webhook_settings import webhook_settings
from kernel.env import env_bool, env_cache, env_float, env_int, env_list, env_secret, env_str
from kernel.logs.config import LOG_FORMATS, LOG_LEVELS, logging_config
from notifications.email_url import email_settings

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("GPUPORTAL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("GPUPORTAL_DEBUG", False)
# Django's technical 404 and 500 pages (every URL pattern, tracebacks) only when asked for, and only
# with DEBUG on; otherwise the portal's own pages, DEBUG or not (kernel/debug_pages.py).
GPUPORTAL_DEBUG_PAGES = DEBUG and env_bool("GPUPORTAL_DEBUG_PAGES", False)

_secret = env_secret("GPUPORTAL_SECRET_KEY")
if _secret is None:
    if not DEBUG:
        raise ImproperlyConfigured(
            "GPUPORTAL_SECRET_KEY (or GPUPORTAL_SECRET_KEY_FILE) must be set when GPUPORTAL_DEBUG is false"
        )
    _secret = "insecure-development-key-only-for-debug-mode-0123456789"  # noqa: S105 - debug only
elif len(_secret) < 32:
    raise ImproperlyConfigured("GPUPORTAL_SECRET_KEY must be at least 32 characters long")
SECRET_KEY = _secret

ALLOWED_HOSTS = env_list("GPUPORTAL_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("GPUPORTAL_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # The portal's apps from the bottom of the import order to the top (gpuportal/packages.py,
    # docs/architecture.md); of kernel only the API's Idempotency-Key store (docs/api.md).
    *PORTAL_APPS,
]

MIDDLEWARE = [
    "observability.process.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "frontend.middleware.PortalSecurityHeadersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "kernel.request_context.RequestContextMiddleware",
    "kernel.logs.access.AccessLogMiddleware",  # one line per request, with its request id and user
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "audit.middleware.AuditDenialMiddleware",
    "frontend.middleware.HtmxLoginRedirectMiddleware",  # an HTMX request of an expired session: HX-Redirect
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "kernel.debug_pages.DebugErrorPagesMiddleware",  # DEBUG on: the portal's 404/400/500 pages all the same
    "kernel.api.errors.DependencyUnavailableMiddleware",  # the database or the broker down: 503, Retry-After
]

ROOT_URLCONF = "gpuportal.urls"
WSGI_APPLICATION = "gpuportal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_database_url = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'gpuportal.sqlite3'}")
try:
    _database = dj_database_url.parse(_database_url, conn_max_age=env_int("GPUPORTAL_DB_CONN_MAX_AGE", 60))
except (ValueError, KeyError) as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
if _database["ENGINE"] not in ("django.db.backends.postgresql", "django.db.backends.sqlite3"):
    raise ImproperlyConfigured("DATABASE_URL must use postgres:// or sqlite://")
if _database["ENGINE"] == "django.db.backends.sqlite3":
    Path(str(_database["NAME"])).parent.mkdir(parents=True, exist_ok=True)
    _database["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    _database["CONN_MAX_AGE"] = 0
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

SESSION_COOKIE_SECURE = env_bool("GPUPORTAL_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
SECURE_HSTS_SECONDS = env_int("GPUPORTAL_HSTS_SECONDS", 0, minimum=0)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
if env_bool("GPUPORTAL_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# A shared cache (Redis) keeps the sign-in lockout's counts and locks the same in every web worker;
# unset: a per-process memory cache, enough for the embedded default and the tests.
CACHES = {"default": env_cache("GPUPORTAL_CACHE_URL")}

# Sign-in lockout (tenants/signin_lockout.py, docs/security.md): every way of presenting a password.
GPUPORTAL_SIGNIN_FAILURES_PER_USERNAME = env_int("GPUPORTAL_SIGNIN_FAILURES_PER_USERNAME", 5, minimum=1)
GPUPORTAL_SIGNIN_FAILURES_PER_ADDRESS = env_int("GPUPORTAL_SIGNIN_FAILURES_PER_ADDRESS", 30, minimum=1)
GPUPORTAL_SIGNIN_WINDOW_SECONDS = env_int("GPUPORTAL_SIGNIN_WINDOW_SECONDS", 15 * 60, minimum=1)
GPUPORTAL_SIGNIN_LOCK_SECONDS = env_int("GPUPORTAL_SIGNIN_LOCK_SECONDS", 15 * 60, minimum=1)
# Reverse proxies in front of the portal that append to X-Forwarded-For; 0: X-Forwarded-For is ignored.
GPUPORTAL_TRUSTED_PROXIES = env_int("GPUPORTAL_TRUSTED_PROXIES", 0, minimum=0)
AUTHENTICATION_BACKENDS = [
    "tenants.signin.LockoutGateBackend",  # first: refuses a locked username or address before any password check
    "django.contrib.auth.backends.ModelBackend",
]

# Personal access tokens (tenants/access_tokens.py, docs/identity.md "API tokens").
GPUPORTAL_TOKEN_MAX_DAYS = env_int("GPUPORTAL_TOKEN_MAX_DAYS", 365, minimum=1)
GPUPORTAL_TOKEN_DEFAULT_DAYS = env_int("GPUPORTAL_TOKEN_DEFAULT_DAYS", 90, minimum=1)
if GPUPORTAL_TOKEN_DEFAULT_DAYS > GPUPORTAL_TOKEN_MAX_DAYS:
    raise ImproperlyConfigured("GPUPORTAL_TOKEN_DEFAULT_DAYS must not exceed GPUPORTAL_TOKEN_MAX_DAYS")

# LDAP sign-in and the directory sync (tenants/ldap/, docs/identity.md "LDAP"): off unless
# GPUPORTAL_LDAP_SERVER_URI is set; then python-ldap (the `ldap` extra) must be installed.
_ldap = ldap_settings()
globals().update(_ldap)
if _ldap["GPUPORTAL_LDAP_SERVER_URI"]:
    AUTHENTICATION_BACKENDS.append("tenants.ldap.backend.DirectoryBackend")  # after the lockout gate

DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

# JSON bodies nested deeper than this are refused with a 400 (kernel/api/parsers.py).
GPUPORTAL_API_JSON_MAX_DEPTH = env_int("GPUPORTAL_API_JSON_MAX_DEPTH", 64, minimum=1)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.token_auth.AccessTokenAuthentication",  # Bearer/Token gpp_…; None for anything else
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["kernel.api.parsers.JSONParser"],  # DRF's, with the nesting depth bounded
    "DEFAULT_SCHEMA_CLASS": "kernel.api.schema.AutoSchema",  # resource tags, ordering, the shared errors
    "EXCEPTION_HANDLER": "kernel.api.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "kernel.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": "Request, approve and track GPU allocations on Kubernetes clusters.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # One tag per resource: the first segment of the path after /api/v1/ (kernel.api.schema).
    "TAGS": [
        {"name": "auth", "description": "API tokens for a username and password, and lifting a sign-in lockout."},
        {"name": "me", "description": "The caller: username, roles and memberships."},
        {"name": "group-mappings", "description": "Which group of an identity provider (OIDC, LDAP) grants which role in which department."},
        {"name": "departments", "description": "Departments, the tenants that hold quotas and approve their members' requests."},
        {"name": "projects", "description": "Projects of a department: a namespace per cluster and its members."},
        {"name": "flavors", "description": "The catalogue of GPU shapes that can be requested (whole GPUs, MIG slices, shared GPUs)."},
        {"name": "sharing-modes", "description": "What each way of sharing a GPU is for, what it isolates and its caveats."},
        {"name": "priority-classes", "description": "Priority classes: which grants may reclaim which."},
        {"name": "quotas", "description": "Each department's quota per flavor or in GPU-equivalents, its usage, effective value and timeline."},
        {"name": "quota-windows", "description": "Temporary raises or cuts of a quota over a time window, their approval and the shrinks coming."},
        {"name": "rule-changes", "description": "Changes of quotas and priority classes waiting for a second platform admin (four-eyes), and their decisions."},
        {"name": "allocations", "description": "Requests for GPUs and the grants they become: approve, reject, release, renew, resize, retry, placement and utilisation."},
        {"name": "allocation-changes", "description": "Renewals and resizes waiting for, or past, a decision."},
        {"name": "fair-share", "description": "Each department's fair-share weight, usage and rank."},
        {"name": "clusters", "description": "Target Kubernetes clusters: registration, credentials, settings, sync, discovery, drift, pushes and rendered manifests."},
        {"name": "nodes", "description": "GPU nodes of the clusters, their settings, and the node agent's report."},
        {"name": "node-tokens", "description": "Tokens of the node agents: issue, list, revoke."},
        {"name": "telemetry", "description": "What the node agents observe: GPUs, MIG instances and utilisation samples."},
        {"name": "usage", "description": "GPU-equivalent-hours used, by department, project, flavor or cluster over time."},
        {"name": "rate-cards", "description": "Prices per GPU-equivalent-hour, for the statements."},
        {"name": "statements", "description": "Monthly statements per department, their lines and corrections."},
        {"name": "idle-policies", "description": "When a grant counts as idle, and what happens to it then."},
        {"name": "idle-cases", "description": "Idle grants found by the policies: keep, exempt or release them."},
        {"name": "webhooks", "description": "A department's notification webhooks: change or remove one."},
        {"name": "notification-deliveries", "description": "Deliveries of notifications by e-mail and webhook, and those that failed."},
        {"name": "audit", "description": "The hash-chained audit log: events, exports, signed checkpoints and their keys."},
        {"name": "custody", "description": "The GPU custody ledger: which pod held which device, from when to when, with the grant; downloads and verifiable bundles."},
        {"name": "what-ifs", "description": "What-ifs: proposed quotas or priority classes replayed by the policy twin on past demand, current against proposed per department."},
    ],
    # Several serializers have a "state": name each set of choices once.
    "ENUM_NAME_OVERRIDES": {
        "AllocationOutStateEnum": "allocations.models.AllocationState",
        "ChangeStateEnum": "allocations.models.ChangeState",
        "ChangeKindEnum": "allocations.models.ChangeKind",
        "WindowKindEnum": "allocations.models.windows.WindowKind",
        "EdgeKindEnum": "allocations.models.windows.EdgeKind",
        "UsageSourceEnum": "telemetry.models.UsageSource",
        "IdentitySourceEnum": "tenants.identity_models.IdentitySource",
        "NotificationModeEnum": "notifications.models.Mode",
        "NotificationDeliveryStateEnum": "notifications.models.DeliveryState",
        "WebhookFormatEnum": "notifications.models.WebhookFormat",
        "WhatIfStateEnum": "whatifs.models.WhatIfState",
        "WhatIfSourceEnum": "whatifs.models.WorkloadSource",
    },
}

# Celery: without a broker, tasks run in-process (the embedded default).
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL")
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL is None
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
# A broker outage must not hold a request for long: the outbox re-dispatches what was not handed over.
CELERY_BROKER_CONNECTION_TIMEOUT = 2
# Beat answers `celery inspect ping -d celerybeat@HOST` while its scheduler ticks (its container health check).
CELERY_BEAT_ENABLE_REMOTE_CONTROL = True
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
# The audit checkpoint heartbeat (docs/audit.md): events newer than the latest checkpoint can be
# removed by the database owner without a trace for at most about this long.
GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS = env_int("GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS", 60, minimum=1)
# Usage accounting (docs/accounting.md): each roll makes the hours that ended this long ago again.
GPUPORTAL_ACCOUNTING_LATE_HOURS = env_int("GPUPORTAL_ACCOUNTING_LATE_HOURS", 3, minimum=1)
# A month's statements close this long after it ended (docs/accounting.md).
GPUPORTAL_ACCOUNTING_CLOSE_MARGIN_HOURS = env_int("GPUPORTAL_ACCOUNTING_CLOSE_MARGIN_HOURS", 6, minimum=0)
# Fair share (docs/accounting.md, "Fair share"): a department's usage weighs half as much this much later.
GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS = env_int("GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS", 168, minimum=1)
# Periodic defragmentation (allocations/booking/defrag_schedule.py): off unless an interval is set.
GPUPORTAL_DEFRAG_EVERY = env_int("GPUPORTAL_DEFRAG_EVERY", 0, minimum=0)
GPUPORTAL_DEFRAG_MOVE_BUDGET = env_int("GPUPORTAL_DEFRAG_MOVE_BUDGET", 16, minimum=1)
GPUPORTAL_DEFRAG_DRY_RUN = env_bool("GPUPORTAL_DEFRAG_DRY_RUN", False)

# Observability (docs/observability.md).
# The bearer token GET /metrics asks for; unset, /metrics answers only requests from loopback.
GPUPORTAL_METRICS_TOKEN = env_secret("GPUPORTAL_METRICS_TOKEN")
# A Celery worker serves its task counters on this port (0: off); PROMETHEUS_MULTIPROC_DIR adds up
# the pool's processes (docs/observability.md).
GPUPORTAL_WORKER_METRICS_PORT = env_int("GPUPORTAL_WORKER_METRICS_PORT", 0, minimum=0)
GPUPORTAL_WORKER_METRICS_ADDRESS = env_str("GPUPORTAL_WORKER_METRICS_ADDRESS", "0.0.0.0")  # noqa: S104
# Alert thresholds, rendered into the PrometheusRule pushed to clusters and into deploy/prometheus/.
# Durations are Prometheus durations (5m, 1h30m); checked when the rules are rendered (delivery/alert_settings.py).
GPUPORTAL_ALERT_GPU_OVERLOAD_RATIO = env_float("GPUPORTAL_ALERT_GPU_OVERLOAD_RATIO", 0.9)
GPUPORTAL_ALERT_GPU_OVERLOAD_FOR = env_str("GPUPORTAL_ALERT_GPU_OVERLOAD_FOR", "10m")
GPUPORTAL_ALERT_QUOTA_EXHAUSTED_RATIO = env_float("GPUPORTAL_ALERT_QUOTA_EXHAUSTED_RATIO", 1.0)
GPUPORTAL_ALERT_QUOTA_EXHAUSTED_FOR = env_str("GPUPORTAL_ALERT_QUOTA_EXHAUSTED_FOR", "5m")
GPUPORTAL_ALERT_IDLE_BELOW_RATIO = env_float("GPUPORTAL_ALERT_IDLE_BELOW_RATIO", 0.05)
GPUPORTAL_ALERT_IDLE_FOR = env_str("GPUPORTAL_ALERT_IDLE_FOR", "2h")
GPUPORTAL_ALERT_PENDING_SECONDS = env_int("GPUPORTAL_ALERT_PENDING_SECONDS", 4 * 3600, minimum=1)
GPUPORTAL_ALERT_PENDING_FOR = env_str("GPUPORTAL_ALERT_PENDING_FOR", "5m")
GPUPORTAL_ALERT_PENDING_GROWTH = env_int("GPUPORTAL_ALERT_PENDING_GROWTH", 10, minimum=1)
GPUPORTAL_ALERT_PENDING_GROWTH_FOR = env_str("GPUPORTAL_ALERT_PENDING_GROWTH_FOR", "15m")
GPUPORTAL_ALERT_SYNC_FAILURES = env_int("GPUPORTAL_ALERT_SYNC_FAILURES", 3, minimum=0)
GPUPORTAL_ALERT_SYNC_STALE_SECONDS = env_int("GPUPORTAL_ALERT_SYNC_STALE_SECONDS", 900, minimum=1)
GPUPORTAL_ALERT_SYNC_FOR = env_str("GPUPORTAL_ALERT_SYNC_FOR", "5m")
GPUPORTAL_ALERT_NODE_STALE_FOR = env_str("GPUPORTAL_ALERT_NODE_STALE_FOR", "5m")
GPUPORTAL_ALERT_CHECKPOINT_AGE_SECONDS = env_int("GPUPORTAL_ALERT_CHECKPOINT_AGE_SECONDS", 600, minimum=1)
GPUPORTAL_ALERT_CHECKPOINT_FOR = env_str("GPUPORTAL_ALERT_CHECKPOINT_FOR", "5m")
# Utilisation per allocation read from each cluster's Prometheus (telemetry/usage/).
GPUPORTAL_UTILISATION_EVERY = env_int("GPUPORTAL_UTILISATION_EVERY", 300, minimum=60)
GPUPORTAL_UTILISATION_MIN_COVERAGE = env_float("GPUPORTAL_UTILISATION_MIN_COVERAGE", 0.8)
GPUPORTAL_UTILISATION_RETENTION_DAYS = env_int("GPUPORTAL_UTILISATION_RETENTION_DAYS", 90, minimum=1)
GPUPORTAL_PROMETHEUS_TIMEOUT_SECONDS = env_float("GPUPORTAL_PROMETHEUS_TIMEOUT_SECONDS", 10.0)
# How often Prometheus scrapes dcgm-exporter and HAMi (the chart's ServiceMonitor: 15 s): a bucket
# of 5 minutes expects 300 / this many samples, and its coverage is what it holds of them.
GPUPORTAL_PROMETHEUS_SCRAPE_SECONDS = env_int("GPUPORTAL_PROMETHEUS_SCRAPE_SECONDS", 15, minimum=1)

# Notifications (docs/notifications.md): e-mail through GPUPORTAL_EMAIL_URL (unset: no e-mail),
# webhooks (the platform-wide one here, departments' through the API), preferences and digests.
GPUPORTAL_EMAIL_URL = env_secret("GPUPORTAL_EMAIL_URL")
GPUPORTAL_EMAIL_FROM = env_str("GPUPORTAL_EMAIL_FROM", "GPU Portal <gpuportal@localhost>")
GPUPORTAL_EMAIL_TIMEOUT_SECONDS = env_float("GPUPORTAL_EMAIL_TIMEOUT_SECONDS", 10.0)
try:  # Django's own EMAIL_* too, for anything else that sends mail (password resets, admins' errors)
    globals().update(email_settings(GPUPORTAL_EMAIL_URL, timeout=GPUPORTAL_EMAIL_TIMEOUT_SECONDS))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
DEFAULT_FROM_EMAIL = GPUPORTAL_EMAIL_FROM
GPUPORTAL_PUBLIC_URL = env_str("GPUPORTAL_PUBLIC_URL")
globals().update(webhook_settings())  # the webhook and delivery settings (gpuportal/webhook_settings.py)

# Allocations and the demo data.
GPUPORTAL_MAX_ALLOCATION_DAYS = env_int("GPUPORTAL_MAX_ALLOCATION_DAYS", 90, minimum=1)
# How far ahead a request may start: a grant holds its GPUs and quota from approval on.
GPUPORTAL_MAX_START_AHEAD_DAYS = env_int("GPUPORTAL_MAX_START_AHEAD_DAYS", 90, minimum=1)
# Four-eyes: nobody decides on their own request or change, platform admins included (docs/quotas.md).
GPUPORTAL_FOUR_EYES = env_bool("GPUPORTAL_FOUR_EYES", True)
# A quota window's RRULE: most characters, least minutes between occurrences, most edges in 366 days.
GPUPORTAL_WINDOW_RRULE_MAX_LENGTH = env_int("GPUPORTAL_WINDOW_RRULE_MAX_LENGTH", 200, minimum=10)
GPUPORTAL_WINDOW_RRULE_MIN_INTERVAL_MINUTES = env_int("GPUPORTAL_WINDOW_RRULE_MIN_INTERVAL_MINUTES", 60, minimum=1)
GPUPORTAL_WINDOW_RRULE_MAX_EDGES = env_int("GPUPORTAL_WINDOW_RRULE_MAX_EDGES", 3000, minimum=2)
# Renewing up to this many days past a grant's original end is self-service; further needs approval.
GPUPORTAL_SELF_RENEW_DAYS = env_int("GPUPORTAL_SELF_RENEW_DAYS", 14, minimum=0)
GPUPORTAL_DEMO_PASSWORD = env_secret("GPUPORTAL_DEMO_PASSWORD") or "demo"
# make run: the demo cluster's utilisation goes on being written as time passes (demo/usage.py).
GPUPORTAL_DEMO_READINGS = env_bool("GPUPORTAL_DEMO_READINGS", False)

# Cluster delivery (read through delivery/conf.py, which checks GPUPORTAL_KUBE_PRUNE_POLICY on use; the
# kubeconfig keys, the inventory's, through clusters/conf.py).
GPUPORTAL_MANIFESTS_DIR = Path(env_str("GPUPORTAL_MANIFESTS_DIR", str(VAR_DIR / "manifests")))
# Key(s) for kubeconfigs at rest, newest first, comma-separated; unset: derived from SECRET_KEY.
GPUPORTAL_KUBECONFIG_KEY = env_secret("GPUPORTAL_KUBECONFIG_KEY")
GPUPORTAL_PUSH_MAX_ATTEMPTS = env_int("GPUPORTAL_PUSH_MAX_ATTEMPTS", 8, minimum=1)
GPUPORTAL_PUSH_BACKOFF_BASE_SECONDS = env_float("GPUPORTAL_PUSH_BACKOFF_BASE_SECONDS", 2.0)
GPUPORTAL_PUSH_BACKOFF_MAX_SECONDS = env_float("GPUPORTAL_PUSH_BACKOFF_MAX_SECONDS", 300.0)
# Longer than CELERY_TASK_TIME_LIMIT, so a slow but live push is not taken over and duplicated.
GPUPORTAL_PUSH_LEASE_SECONDS = env_float("GPUPORTAL_PUSH_LEASE_SECONDS", 330.0)
GPUPORTAL_KUBE_PRUNE_POLICY = env_str("GPUPORTAL_KUBE_PRUNE_POLICY", "delete-namespace")
GPUPORTAL_KUBE_USER_PREFIX = env_str("GPUPORTAL_KUBE_USER_PREFIX", "")
GPUPORTAL_KUBE_APPLY_CONCURRENCY = env_int("GPUPORTAL_KUBE_APPLY_CONCURRENCY", 16, minimum=1)
GPUPORTAL_KUBE_REQUEST_TIMEOUT_SECONDS = env_float("GPUPORTAL_KUBE_REQUEST_TIMEOUT_SECONDS", 30.0)
# A pod Pending for less than this is not explained yet (docs/pending.md, "Pending pods").
GPUPORTAL_PENDING_POD_THRESHOLD_SECONDS = env_int("GPUPORTAL_PENDING_POD_THRESHOLD_SECONDS", 60, minimum=0)
GPUPORTAL_LIMITRANGE_DEFAULT_CPU = env_str("GPUPORTAL_LIMITRANGE_DEFAULT_CPU", "100m")
GPUPORTAL_LIMITRANGE_DEFAULT_MEMORY = env_str("GPUPORTAL_LIMITRANGE_DEFAULT_MEMORY", "256Mi")

# The audit log (read through audit/conf.py, which checks the origin and parses the keys on use).
GPUPORTAL_AUDIT_ORIGIN = env_str("GPUPORTAL_AUDIT_ORIGIN", "gpuportal/audit")
# Required unless DEBUG (then audit/conf.py makes a development key in VAR_DIR).
GPUPORTAL_AUDIT_SIGNING_KEY = env_secret("GPUPORTAL_AUDIT_SIGNING_KEY")
GPUPORTAL_AUDIT_TRUSTED_KEYS = env_secret("GPUPORTAL_AUDIT_TRUSTED_KEYS")
GPUPORTAL_AUDIT_CHECKPOINT_DIR = Path(env_str("GPUPORTAL_AUDIT_CHECKPOINT_DIR", str(VAR_DIR / "audit-checkpoints")))
# The restricted runtime role's URL, given to `migrate` (run as the owner) so it grants that role.
GPUPORTAL_APP_DATABASE_URL = env_str("GPUPORTAL_APP_DATABASE_URL")
# Unset: the user of GPUPORTAL_APP_DATABASE_URL.
GPUPORTAL_DB_RUNTIME_ROLE = env_str("GPUPORTAL_DB_RUNTIME_ROLE")
GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE = env_bool("GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE", False)

# Node telemetry (docs/telemetry.md).
GPUPORTAL_TELEMETRY_REPORT_MAX_BYTES = env_int("GPUPORTAL_TELEMETRY_REPORT_MAX_BYTES", 2 * 1024 * 1024, minimum=1024)
GPUPORTAL_TELEMETRY_RAW_RETENTION_HOURS = env_int("GPUPORTAL_TELEMETRY_RAW_RETENTION_HOURS", 24, minimum=1)
GPUPORTAL_TELEMETRY_5M_RETENTION_DAYS = env_int("GPUPORTAL_TELEMETRY_5M_RETENTION_DAYS", 30, minimum=1)
GPUPORTAL_TELEMETRY_1H_RETENTION_DAYS = env_int("GPUPORTAL_TELEMETRY_1H_RETENTION_DAYS", 365, minimum=1)
GPUPORTAL_TELEMETRY_STALE_INTERVALS = env_int("GPUPORTAL_TELEMETRY_STALE_INTERVALS", 3, minimum=1)
GPUPORTAL_TELEMETRY_STALE_MIN_SECONDS = env_int("GPUPORTAL_TELEMETRY_STALE_MIN_SECONDS", 90, minimum=1)
# The custody ledger (custody/conf.py, docs/custody.md).
GPUPORTAL_CUSTODY_GAP_INTERVALS = env_float("GPUPORTAL_CUSTODY_GAP_INTERVALS", 2.5)
GPUPORTAL_CUSTODY_CLOCK_TOLERANCE_SECONDS = env_float("GPUPORTAL_CUSTODY_CLOCK_TOLERANCE_SECONDS", 1.0)

# Logs (kernel/logs/, docs/observability.md "Logs"): one line per record on standard error, JSON
# unless console is asked for; gunicorn and Celery use this configuration too.
GPUPORTAL_LOG_FORMAT = env_str("GPUPORTAL_LOG_FORMAT", "json").lower()
if GPUPORTAL_LOG_FORMAT not in LOG_FORMATS:
    raise ImproperlyConfigured(f"GPUPORTAL_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, got {GPUPORTAL_LOG_FORMAT!r}")
GPUPORTAL_LOG_LEVEL = env_str("GPUPORTAL_LOG_LEVEL", "INFO").upper()
if GPUPORTAL_LOG_LEVEL not in LOG_LEVELS:
    raise ImproperlyConfigured(f"GPUPORTAL_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {GPUPORTAL_LOG_LEVEL!r}")
LOGGING = logging_config(log_format=GPUPORTAL_LOG_FORMAT, level=GPUPORTAL_LOG_LEVEL)
# Tracing (observability/tracing.py): spans are exported over OTLP only when an endpoint is set; the
# OpenTelemetry SDK reads it and every other OTEL_* variable itself.
OTEL_EXPORTER_OTLP_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_ENDPOINT") or env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
OTEL_SERVICE_NAME = env_str("OTEL_SERVICE_NAME", "gpuportal")

# OpenID Connect sign-in (tenants/oidc/, docs/identity.md "OpenID Connect"): on when an issuer is set.
GPUPORTAL_OIDC_ISSUER = env_str("GPUPORTAL_OIDC_ISSUER")
GPUPORTAL_OIDC_CLIENT_ID = env_str("GPUPORTAL_OIDC_CLIENT_ID")
GPUPORTAL_OIDC_CLIENT_SECRET = env_secret("GPUPORTAL_OIDC_CLIENT_SECRET")
GPUPORTAL_OIDC_NAME = env_str("GPUPORTAL_OIDC_NAME", "single sign-on")  # "Sign in with <name>"
GPUPORTAL_OIDC_SCOPES = env_str("GPUPORTAL_OIDC_SCOPES", "openid profile email")
GPUPORTAL_OIDC_GROUPS_CLAIM = env_str("GPUPORTAL_OIDC_GROUPS_CLAIM", "groups")  # a dotted path: realm_access.roles
GPUPORTAL_OIDC_AUDIENCE = env_str("GPUPORTAL_OIDC_AUDIENCE")  # the API's access tokens; unset: the client id
GPUPORTAL_OIDC_TIMEOUT_SECONDS = env_float("GPUPORTAL_OIDC_TIMEOUT_SECONDS", 5.0)
GPUPORTAL_OIDC_LEEWAY_SECONDS = env_int("GPUPORTAL_OIDC_LEEWAY_SECONDS", 30, minimum=0)
# Username and password sign-in (the portal's form, the admin's, POST /api/v1/auth/token/).
GPUPORTAL_AUTH_PASSWORD = env_bool("GPUPORTAL_AUTH_PASSWORD", True)
if GPUPORTAL_OIDC_ISSUER:
    if not GPUPORTAL_OIDC_CLIENT_ID:
        raise ImproperlyConfigured("GPUPORTAL_OIDC_CLIENT_ID must be set when GPUPORTAL_OIDC_ISSUER is")
    if "openid" not in GPUPORTAL_OIDC_SCOPES.split():
        raise ImproperlyConfigured("GPUPORTAL_OIDC_SCOPES must include openid")
    _api_authentication = REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]
    assert isinstance(_api_authentication, list)
    # After the access tokens: each returns None for the other's credentials.
    _api_authentication.insert(1, "tenants.oidc.drf.OidcBearerAuthentication")
elif not GPUPORTAL_AUTH_PASSWORD:
    raise ImproperlyConfigured("GPUPORTAL_AUTH_PASSWORD=false needs single sign-on (GPUPORTAL_OIDC_ISSUER)")
AUTHENTICATION_BACKENDS.append("tenants.oidc.backend.OidcBackend")  # takes only the OIDC callback's credentials

# Celery beat's schedule, from the one periodic schedule (gpuportal/periodic.py) the embedded
# default's clock reads too; last, as its intervals and switches are settings above.
CELERY_BEAT_SCHEDULE = beat_schedule(globals())
