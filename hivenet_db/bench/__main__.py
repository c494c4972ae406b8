"""``python -m hivenet_db.bench``: the benchmark runner (same as ``hivenet-db bench``)."""

import sys

from hivenet_db.bench import main

sys.exit(main())
