"""A rank's start and its run of a built-in task: argument parsing, the run's settings, torch.distributed,
the stack and precision checks, the Trainer's setup and how the process exits."""
