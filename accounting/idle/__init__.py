"""Idle-GPU reclamation (docs/accounting.md, "Idle grants")."""
