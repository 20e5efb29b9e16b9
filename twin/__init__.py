"""The policy twin: a month of GPU demand replayed through the portal's own rules in virtual time
(docs/twin.md).

No Django and no database: the formats (``errors``, ``workload``, ``clusters``, ``policy``) read
plain files; the sources (``sources``) read the Alibaba trace or generate a seeded month; the
replay (``replay``) composes the portal's pure quota algebra (``allocations.quotas.algebra``,
``allocations.quotas.victims``) and the placement engine (``placement``) under four policies and
measures them (``replay.metrics``).
"""
