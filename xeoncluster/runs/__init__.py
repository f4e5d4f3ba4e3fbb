"""The wire between this machine and a cluster's agent: where its files live on the master, the records
and requests both sides read (versioned), and the client that starts, reads and cancels runs."""
