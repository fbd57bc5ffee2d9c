"""Experiments: one absl app per study, configs in experiments/configs/."""
