"""`python -m airflow_delta_provider` runs the `deltalog` CLI."""

import sys

from .cli import main

sys.exit(main())
