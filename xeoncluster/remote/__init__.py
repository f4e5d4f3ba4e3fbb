"""Reaching the nodes: one SSH connection per node with pinned host keys (shell), remote command lines
built from argv words (command), and shipping files to every node by content digest (package_sync)."""
