import sys

from hivenet_db.cli import main

sys.exit(main())
