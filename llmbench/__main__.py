import sys

from llmbench.cli import main

sys.exit(main())
