"""Facade methods that are an engine's methods: the client composes its engines and delegates,
holding no logic of its own (Procrastinate's ``App`` hands work to its ``JobManager``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")


class delegate(Generic[P, R]):
    """``client.name`` is ``client.<engine>.name``: the engine's bound method, with its
    signature and docstring (``help(client.enqueue)`` shows ``AsyncJobs.enqueue``'s).

        class AsyncClient:
            enqueue = delegate("jobs", AsyncJobs.enqueue)

    The engine attribute must be set in ``__init__`` before the first call; the bound method
    is then cached on the instance, so a call costs what calling the engine does. On the class
    (``AsyncClient.enqueue``) it is the engine's function, so ``inspect.signature`` and the
    docs show the engine's signature.
    """

    def __init__(self, engine: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self._engine = engine
        self._method = method
        self._name = method.__name__
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Callable[Concatenate[Any, P], R]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self._method
        bound = getattr(getattr(obj, self._engine), self._method.__name__)
        obj.__dict__[self._name] = bound  # a non-data descriptor: the next lookup finds this
        return bound
