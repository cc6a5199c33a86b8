"""Both trainers offer what the session uses of a trainer (session.Trainer) and of its class (session.TrainerClass),
and the registry names them; mypy checks the same in train/loop.py."""

from __future__ import annotations

import inspect

import pytest

from ablate.train.builtin import BuiltinTrainer
from ablate.train.loop import TRAINERS
from ablate.train.session import Trainer, TrainerClass
from ablate.train.trl_backend import TRLTrainer

CLASSES = {"ablate": BuiltinTrainer, "trl": TRLTrainer}


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


def test_the_protocols_name_what_the_session_uses():
    assert _members(Trainer) == {"label", "scheme", "facts", "max_lag", "resume", "train"}
    assert _members(TrainerClass) == {"preflight"}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_trainer_class_has_the_protocols_members(name):
    cls = CLASSES[name]
    assert TRAINERS.get(name) is cls
    assert _members(Trainer) <= set(dir(cls))
    for method in ("resume", "train"):
        assert (
            list(inspect.signature(getattr(cls, method)).parameters)[1:]
            == list(inspect.signature(getattr(Trainer, method)).parameters)[1:]
        )
    assert isinstance(inspect.getattr_static(cls, "preflight"), staticmethod)
    assert list(inspect.signature(cls.preflight).parameters) == ["cfg"]
    assert next(iter(inspect.signature(cls).parameters)) == "session"
