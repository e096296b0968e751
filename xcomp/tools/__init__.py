"""Tools around the compiler: `xcomp conformance` with its list of known gaps, and `xcomp info`."""
