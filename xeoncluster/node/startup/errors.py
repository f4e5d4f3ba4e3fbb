"""Errors `python -m xeoncluster.node` turns into one line on stderr instead of a traceback.

The same concept as core/errors.py on the laptop's side of the wire: the ranks import nothing outside
node/, so they keep their own."""


class TrainingError(Exception):
    """An expected failure. ``exit_code`` 2 means bad input; 1 means the run failed."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
