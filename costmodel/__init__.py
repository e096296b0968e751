"""The XGBoost cost model that ranks schedule candidates, and the features it reads."""

from .features import FEATURES_VERSION, FeatureExtractor, knob_vector
from .model import CostModel, pretrained_model, ranking_quality, relevance

__all__ = ["FEATURES_VERSION", "FeatureExtractor", "knob_vector", "CostModel", "pretrained_model", "ranking_quality", "relevance"]
