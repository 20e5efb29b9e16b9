"""Deterministic simulation of the whole policy stack over time (docs/simulation.md)."""
