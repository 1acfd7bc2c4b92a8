"""The one model registry: ``ModelConfig.name`` -> class.

A model module registers its class with ``@register("<name>")``, and the module is named after
the model (``pipeline_lib/models/<name>.py``). Looking a name up imports that module alone.

WHY not one import line per model here: every training job's code hash
(pipeline_lib/codehash.py) follows the static imports of the trainer, and a registry that
imported every model put every model's file into every job's hash, so a comment in ``cache.py``
retrained the baseline. The hash of a job now covers the shared core, the trainer and the
module of its own model (``Plan.train_code``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, MutableMapping
from typing import TypeVar

from torch import nn

from pipeline_lib.models.config import ModelConfig

M = TypeVar("M", bound=type[nn.Module])


class Registry(MutableMapping[str, type[nn.Module]]):
    """Registered models by name; a lookup imports the name's module, listing imports them all
    (tests, benchmarks and error messages list; a run looks one name up)."""

    def __init__(self) -> None:
        self._classes: dict[str, type[nn.Module]] = {}

    def _load(self, name: str) -> None:
        if name in self._classes or not name.isidentifier():
            return
        try:
            importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{name}":
                raise   # the model's module exists but fails to import: say why

    def _load_all(self) -> None:
        from pipeline_lib import models

        for info in pkgutil.iter_modules(models.__path__):
            importlib.import_module(f"{__package__}.{info.name}")

    def __getitem__(self, name: str) -> type[nn.Module]:
        self._load(name)
        return self._classes[name]

    def __setitem__(self, name: str, cls: type[nn.Module]) -> None:
        self._classes[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._classes[name]

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self._load(name)
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        self._load_all()
        return iter(dict(self._classes))

    def __len__(self) -> int:
        self._load_all()
        return len(self._classes)


MODELS = Registry()


def register(name: str) -> Callable[[M], M]:
    """Class decorator: ``@register("doct")`` on the model class of ``models/doct.py``."""

    def add(cls: M) -> M:
        if name in MODELS._classes and MODELS._classes[name] is not cls:
            raise ValueError(f"model {name!r} registered twice: {MODELS._classes[name]} and {cls}")
        MODELS[name] = cls
        return cls

    return add


def build_model(cfg: ModelConfig) -> nn.Module:
    if cfg.name not in MODELS:
        raise ValueError(f"unknown model {cfg.name!r}; registered: {sorted(MODELS)}")
    return MODELS[cfg.name](cfg)
