"""The read side of an ``Instance``: ``Part`` makes a reader such as ``inst.state`` read the one
owner of the field (``inst.lifecycle.state``), so each field has one writer and no copies."""

from __future__ import annotations

from typing import Generic, TypeVar, overload

T = TypeVar("T")


class Part(Generic[T]):
    """A read-only attribute of ``Instance`` that reads the same-named attribute of one of its parts.

    ``state = Part[ProcessState]("lifecycle")`` makes ``inst.state`` read ``inst.lifecycle.state``:
    each field has one owner, and the instance's readers see it without copies.
    """

    def __init__(self, part: str) -> None:
        self._part = part
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Part[T]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> T: ...
    def __get__(self, obj: object | None, owner: type) -> Part[T] | T:
        if obj is None:
            return self
        value: T = getattr(getattr(obj, self._part), self._name)
        return value
