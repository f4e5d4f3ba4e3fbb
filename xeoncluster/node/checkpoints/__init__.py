"""Checkpoints on the nodes: which one to resume from, every node's copy, saving off the critical
path, and stopping cleanly at a step's end when a notice says the node is going away."""
