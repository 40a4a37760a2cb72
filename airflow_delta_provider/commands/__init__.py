"""The command layer shared by the `deltalog` CLI, the spark-submit job and the operators: a
`Request` in, a result dict out (`command`), with the checks, reports and JSON shapes it uses."""

from .command import ACTIONS, ENGINES, Outcome, Request, execute, run

__all__ = ["ACTIONS", "ENGINES", "Outcome", "Request", "execute", "run"]
