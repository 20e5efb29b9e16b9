"""Quota windows through their life: requested and approved (``services``), their edges applied
(``tick``) and what a coming shrink does to the grants it meets (``shrinks``)."""
