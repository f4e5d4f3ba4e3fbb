"""`xeoncluster train`: prepare, submit and follow (train.py), where the run is kept and the checkpoint
a resume takes (train_storage.py), fetching results (train_results.py)."""
