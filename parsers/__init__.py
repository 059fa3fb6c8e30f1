"""Parsers: raw log bytes -> typed frames (runs, iterations, timers)."""
