from collections.abc import Callable
from typing import Any

def route_construction(cls: type, factory: Callable[..., Any]) -> None: ...
