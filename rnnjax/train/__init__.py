"""Training: optimizer chains with clipping, jitted steps, the truncated-BPTT loop."""
