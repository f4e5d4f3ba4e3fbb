"""The local provider: network namespaces on this machine, each with its own sshd."""
