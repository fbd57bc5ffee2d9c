"""rnnjax: the Elman recurrent network in JAX, and its vanishing and exploding gradients."""
