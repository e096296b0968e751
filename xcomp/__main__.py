import sys

from xcomp.cli import main

if __name__ == "__main__":  # multiprocessing's forkserver/spawn import this module again as __mp_main__
    sys.exit(main())
