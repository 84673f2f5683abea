"""`python -m ember` runs the command line."""
import sys

from ember.cli import main

sys.exit(main())
