"""``python bench/run.py [options]``: the benchmark runner (hivenet_db/bench/), by its path."""

import sys

from hivenet_db.bench import main

if __name__ == "__main__":
    sys.exit(main())
