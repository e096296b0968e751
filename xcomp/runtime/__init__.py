"""What a compiled model is at run time: `Module` (call, time, save, load) and the signature its inputs are checked
against."""
