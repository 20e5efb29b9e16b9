"""Quota promises: guarantees, borrowing, reclaim and priority preemption (docs/quotas.md).

``algebra`` is pure (numbers in, a decision out) so that it can be tested with properties;
``planning`` reads the database into it; the services in ``allocations.grants.services`` act on a plan.
"""
