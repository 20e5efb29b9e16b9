from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")
application = get_wsgi_application()

# The placement engine's MIG tables, built once as the process starts (in the background).
from allocations.booking.reservations import placement_engine_warm_at_start  # noqa: E402

placement_engine_warm_at_start()

# In-process tasks (no broker, hence no beat): this process re-dispatches due pushes itself and
# runs the allocation timeline (expiry, reclaims, scheduled starts) and the audit checkpoint heartbeat.
from audit.heartbeat import audit_heartbeat_start  # noqa: E402 - needs the apps loaded above
from clusters.outbox import pushes_sweeper_start  # noqa: E402
from gpuportal.clock import clock_start  # noqa: E402

pushes_sweeper_start()
clock_start()
audit_heartbeat_start()
