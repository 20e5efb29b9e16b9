"""Grants through their life: the state moves (``transitions``), the workflow services
(``services``), scheduled starts, reclaims, changes of terms and the notices they send."""
