"""Fair share: a decayed usage per department that orders the approvals queue and, among grants of
equal priority, which borrowed grants are reclaimed first (docs/accounting.md, "Fair share").

``tree`` is the arithmetic, pure (no Django): decay, the decayed integral of a held interval,
Slurm's classic factor and the Fair Tree ranking. ``models`` holds each department's shares and
decayed usage, ``services`` the decay tick and the audited change of shares, ``reads`` the table
and the factors admission and the portal read, ``apis`` the API.
"""
