"""The quota tree with quota windows, read from the database: the quotas and their approved
windows read once (two queries) into the pure view of ``allocations.quotas.stepped`` (the lowest
numbers over an interval, or the tree step by step; see that module), which the policy twin builds
from its policy file instead.
"""

from __future__ import annotations

from collections import defaultdict

from allocations.models import Quota
from allocations.models.windows import QuotaWindow, ShrinkPolicy, WindowState
from allocations.quotas import stepped, windows
from allocations.quotas.stepped import Step, SteppedTree, binding_checks, step_scope, unstepped
from allocations.quotas.window_reading import window_spec


class QuotaView(stepped.QuotaView):
    """The pure view (``stepped.QuotaView``) read from the database."""

    @classmethod
    def read(cls, *, parents: dict[int, int | None], with_windows: bool = True) -> QuotaView:
        rows = list(Quota.objects.values_list("pk", "department_id", "flavor_id", "guaranteed", "limit", "lending_limit"))
        specs: dict[int, list[windows.WindowSpec]] = defaultdict(list)
        waiting = set()
        for row in QuotaWindow.objects.filter(state=WindowState.APPROVED).order_by("pk") if with_windows else ():
            specs[row.quota_id].append(window_spec(row))
            if row.shrink_policy == ShrinkPolicy.WAIT:
                waiting.add(row.pk)
        return cls(parents=parents, rows=rows, specs=dict(specs), waiting=frozenset(waiting))


__all__ = ["QuotaView", "Step", "SteppedTree", "binding_checks", "step_scope", "unstepped"]
