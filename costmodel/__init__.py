"""The XGBoost cost model that ranks schedule candidates (lands with the tuner, issue #4)."""
