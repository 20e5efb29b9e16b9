"""Utilisation per allocation: dcgm-exporter's and HAMi's series read from each cluster's
Prometheus, attributed to the allocations that booked the devices, with the node agents as the
second source (docs/observability.md, "Utilisation per allocation: sources")."""
