"""The training loop, its hooks, checkpoints and stop signals."""
