"""Runners: experiment specs -> validated, rendered, launched training jobs."""
