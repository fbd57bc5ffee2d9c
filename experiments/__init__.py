"""The studies of this checkout: their experiments, their shared tasks, and configs/."""
