"""The GPU custody ledger: which pod held which GPU, from when to when, with the grant it belongs to
(docs/custody.md)."""
