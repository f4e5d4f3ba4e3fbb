"""Node-side training package: ``python -m xeoncluster.node squad|glue|demo-assets ...``."""
