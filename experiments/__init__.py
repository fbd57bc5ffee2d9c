"""The studies of this checkout: an Experiment a module, their shared tasks; configs in configs/."""
