"""The floor everything stands on: errors, where the project's own files live (paths), the software
stacks, and progress on the terminal. It imports nothing of ours but node/'s stack rules."""
