"""The replay: virtual time, an event queue, four policies on the same demand, and their metrics.

``state`` holds the GPUs (placement engine clusters) and the grants that hold them; ``modes``
decides, per policy, whether a waiting request starts now, waits, or has grants reclaimed for it;
``engine`` runs the events; ``metrics`` measures what happened; ``load`` finds the sustainable load.
"""
