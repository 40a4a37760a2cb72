"""spark-submit entry point of the bundled job (the logic lives in `airflow_delta_provider.jobs.runner`).

spark-submit --py-files airflow_delta_provider.zip delta_job.py --table URI --action snapshot --result-uri OUT
"""

import sys

from airflow_delta_provider.jobs.runner import main

if __name__ == "__main__":
    sys.exit(main())
