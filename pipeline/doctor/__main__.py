"""`python -m pipeline.doctor`: see pipeline/doctor/__init__.py."""
import sys

from pipeline.doctor import main

sys.exit(main())
