import os

# Tests run on CPU; W&B never reaches the network from a test.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
