"""`python -m airflow_delta_provider.cli`: the `deltalog` command."""

import sys

from . import main

sys.exit(main())
