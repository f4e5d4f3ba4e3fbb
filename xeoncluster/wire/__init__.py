"""What both sides of the wire read the same way: the versions of every record that crosses it
(contract), where things live on a node and in the agent's home (layout), and a run's output files."""
