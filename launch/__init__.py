"""Command-line entries: run one config, sweep one on any executor, re-measure the tables."""
