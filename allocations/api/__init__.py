"""The allocations REST endpoints, one module per resource; ``allocations.urls`` routes them."""
