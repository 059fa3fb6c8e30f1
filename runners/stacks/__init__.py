"""Stacks."""
