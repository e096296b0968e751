"""The NCHW conv on plain OIHW weights (TVM's lowering: grouped convs whose groups are too narrow to pack, and
what legalize.py leaves to TVM): the pixel-vector tile of conv.py."""

from __future__ import annotations

from ..analysis import mac_operands
from .conv import PixelTileConv


class UnpackedConvTemplate(PixelTileConv):
    form = "unpacked"

    def _read_shape(self, main, infos):
        """Groups and the vectorized pixel axis of a conv on plain OIHW weights."""
        super()._read_shape(main, infos)
        in_per_group, kh, kw = main.extents[4:]
        weight = (self.out_channels, in_per_group, kh, kw)
        loads = [tuple(int(d) if hasattr(d, "value") else None for d in load.source.shape)
                 for load in mac_operands(main.block)]
        data = next(shape for shape in loads if shape != weight)
        self.groups = data[1] // in_per_group
        # 1x1, stride 1, unpadded: a channel's pixels are one contiguous run (flattening turns y * W + x back
        # into the pixel index), so vectors need not fit in a row
        self.fused_pixels = kh == kw == 1 and data[2:] == (self.out_h, self.out_w)
        self.pixels = self.out_h * self.out_w if self.fused_pixels else self.out_w


__all__ = ["UnpackedConvTemplate"]
