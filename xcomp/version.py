"""The version of xcomp, in a module of its own: the package imports everything else at import time."""

__version__ = "0.1.0"
