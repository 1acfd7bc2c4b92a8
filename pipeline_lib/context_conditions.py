"""Which models read a per-sentence context, and what may replace it: the facts the plan (which
must not import torch), the trainer and the decoder share about context controls.

A random-context twin trains a context model with other documents' sentences as its context,
and an ablated decode gives a trained one other documents' sentences or nothing: the controls
that separate the use of context from added capacity and regularisation (Kim et al. 2019; Li et
al. 2020, where multi-encoder gains persist with random context).
"""

#: registry models that read context, and so have a random-context twin and ablated decodes:
#: those whose extra input is a per-sentence context rule (DataMode.CONTEXT: the previous source
#: sentences, swapped by ModelInputs.ablated), and those that read whole documents (the cache's
#: translation history, STREAM; cross-task's sub-documents, DOCUMENT), whose documents are
#: regrouped from other documents' sentences instead (pipeline_lib/mixed_documents.py).
#: tests/unit/test_context_conditions.py checks this against every registered model.
CONTEXT_MODELS = frozenset({"doct", "camn", "cache", "crosstask"})

#: what such a model may read (:meth:`pipeline_lib.models.inputs.ModelInputs.ablated`): its
#: document's context, other documents' sentences in the same amount, or none
CONTEXT_CONDITIONS = ("true", "random", "empty")
