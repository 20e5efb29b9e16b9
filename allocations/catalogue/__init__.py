"""What is offered and who sees it: the allocation state machine (``states``), the tenant-scoped
reads (``selectors``) and what each way of sharing a GPU is for (``sharing_guide``).

Second floor of ``allocations`` (docs/architecture.md): it imports only ``allocations.models``."""
