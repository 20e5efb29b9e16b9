"""The catalogue's writes (flavors, priority classes, quotas: ``catalogue``) and the four-eyes
rule over them (``changes``): only ``rules.changes`` calls the catalogue's writes."""
