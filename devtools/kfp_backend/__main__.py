import sys

from devtools.kfp_backend.cli import main

sys.exit(main())
