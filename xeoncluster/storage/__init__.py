"""Where runs keep what must outlive the nodes: checkpoints, logs, events and results."""
