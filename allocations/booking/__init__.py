"""The Django side of placement: the engine's picture of a cluster built from the inventory and
the live reservations (``view``), booking concrete GPUs at approval (``reservations``), the dry
run behind the request form and the API's placement preview (``preview``), and defragmentation
(``defrag``). The engine itself, in ``placement``, knows nothing of Django."""
