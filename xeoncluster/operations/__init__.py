"""What both the verbs and the master's agent do to a cluster: add and configure nodes, repair, prepare a
run on the nodes, tear down. Nothing here parses options or renders output."""
