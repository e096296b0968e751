"""Tuning: measure candidates, search knob spaces guided by the cost model, store records."""
