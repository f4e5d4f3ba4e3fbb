"""The built-in tasks (SQuAD, GLUE) and the offline demo: what a task is, its data, features, metrics
and prediction files."""
