"""Temporal executor tests against a real server (docs/design.md#temporal)."""
