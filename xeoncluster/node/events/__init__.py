"""What a run reports: the typed events, rank 0's reporter, metrics.json, progress lines, rank labels
on output, the loss curve (drawn with the standard library) and the trackers."""
