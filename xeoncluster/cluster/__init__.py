"""What the commands and the master's agent share about one cluster: the command context, its state,
refreshing it, its files, its image and playbooks, the packages nodes install, its removal and
autostop, and the one door for values read from the master (untrusted)."""
