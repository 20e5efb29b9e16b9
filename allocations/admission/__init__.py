"""Admission as the database sees it: the quota tree and the grants read into the pure algebra
(``planning``), the GPUs a request would use (``room``), a change to a grant (``extending``) and
the projects' caps (``project_caps``). ``admission_decide`` is the one verdict on a request."""
