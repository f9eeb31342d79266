"""Training: the model, the Lightning trainer, checkpoints and throughput accounting."""
