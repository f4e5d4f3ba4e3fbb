"""`xeoncluster storage`: runs as storage keeps them (stored_runs.py, also what `runs`, `logs` and
`compare` read of a cluster that is gone) and setting up the shared bucket (storage_init.py)."""
