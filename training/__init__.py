"""Node-side training package: ``python -m training squad|glue|demo-assets ...``."""
