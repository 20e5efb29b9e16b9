"""Where a workload comes from: the Alibaba GPU trace v2023 (``alibaba``) or a seeded generator
(``generator``); both also write the policy their departments and classes need (``catalogue``).
The portal's own history (``--from-history``) is not yet a source (docs/twin.md)."""
