"""The command layer shared by the `deltalog` CLI, the spark-submit job and the operators: a
`Request` (`request`: common fields plus one options class per action) in, a result dict out
(`command`: one handler per action in `ACTIONS`), with the checks, reports and JSON shapes it uses."""

from .command import ACTIONS, Outcome, execute, run
from .request import ENGINES, OPTIONS, Request

__all__ = ["ACTIONS", "ENGINES", "OPTIONS", "Outcome", "Request", "execute", "run"]
