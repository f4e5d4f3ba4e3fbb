"""Measuring and looking inside running ranks: thread stacks on SIGUSR1, the startup clock, and the
step and gradient-exchange clocks the benchmarks read."""
