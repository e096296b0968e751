import sys

from xcomp.cli import main

sys.exit(main())
