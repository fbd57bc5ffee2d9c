"""Command-line entries: run one config, or sweep one on any executor (local, Slurm, Ray)."""
