"""xeoncluster: short-lived Intel Xeon clusters for fine-tuning Hugging Face models.

Importing it imports nothing else: the nodes load `xeoncluster.node` without the CLI's dependencies."""
