"""Exports of trained checkpoints to inference engines outside PyTorch.

``python -m pipeline_lib.export ctranslate2 results/train_model/transformer --output ct2/``
writes a CTranslate2 model directory (:mod:`pipeline_lib.export.ctranslate2`). Exports read
checkpoint directories (pipeline_lib/checkpoint.py) and the models that wrote them; no
pipeline stage imports this package, so no rule reruns when it changes.
"""
