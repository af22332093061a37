"""Upstream job kinds the hub serves and translates into its gang (see base.py)."""
