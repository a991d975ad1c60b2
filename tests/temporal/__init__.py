"""Temporal executor tests against a real server (SPEC §7; issue 4 item 5)."""
