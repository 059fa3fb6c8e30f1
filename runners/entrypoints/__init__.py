"""Entrypoints."""
