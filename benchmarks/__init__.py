"""Speed benchmarks: ratios measured in one process, never timed tests."""
