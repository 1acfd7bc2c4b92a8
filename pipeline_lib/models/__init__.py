"""Models: the shared Transformer core (layers.py, transformer.py) and the registry of all models."""

from pipeline_lib.models.config import ModelConfig
from pipeline_lib.models.output import ModelOutput
from pipeline_lib.models.registry import MODELS, build_model
from pipeline_lib.models.transformer import DecoderState, EncoderOut, Transformer

__all__ = ["MODELS", "DecoderState", "EncoderOut", "ModelConfig", "ModelOutput", "Transformer", "build_model"]
