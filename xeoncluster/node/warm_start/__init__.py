"""Warm rank starts: a rank forked from a process that has already imported torch and the Trainer.

A cold rank spends most of its start importing its libraries (about 7 of the 10 CPU-seconds of a short run's
start, docs/spot.md), and every relaunch after a lost node pays it again on every node. Here the first rank on
a node starts a server (`python -m xeoncluster.node.warm_start`) that imports them once and forks a ready
process for each rank that follows, with that rank's argv, environment, working folder and standard streams.
The process MPI started stays the rank's face: it relays signals, and exits as the forked rank does.
"""
