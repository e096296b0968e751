"""Graph passes on the imported Relax model: constant folding, affine folding into convs, the blocked channel
layout, scalar-kernel isolation, and the partition into operator groups."""
