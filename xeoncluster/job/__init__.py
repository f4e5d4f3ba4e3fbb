"""One training job as values, computed on the laptop and read again by the master's agent and by
`export`: the request, its launch plan, a script's launch line and workdir, a sweep, the trackers'
environment."""
