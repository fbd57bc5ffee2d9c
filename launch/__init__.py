"""Launchers: sweeps of experiment runs on a local process pool."""
