"""How the stores write arguments and results: msgpack (msgspec), with text UTF-8 cannot encode
kept losslessly; and how a session's rows become ``StoredCall`` s in model order."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from fastgate.durable.store import StoredCall, StoreError
from fastgate.model.results import DurableResult

# -- encoding --------------------------------------------------------------------------------------

# msgpack extensions, used only for text UTF-8 cannot encode (lone surrogates, e.g. from
# surrogateescape'd tool output): such a str, and a map with such a key (as [key, value] pairs).
_SURROGATE_TEXT, _SURROGATE_MAP = 1, 2
_encoder = msgspec.msgpack.Encoder()


def _escape_surrogates(value: Any) -> Any:
    """Builtins where each str that UTF-8 cannot encode becomes a ``_SURROGATE_TEXT`` extension."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return msgspec.msgpack.Ext(_SURROGATE_TEXT, value.encode("utf-8", "surrogatepass"))
        return value
    if isinstance(value, dict):
        items = [(_escape_surrogates(k), _escape_surrogates(v)) for k, v in value.items()]
        if any(isinstance(k, msgspec.msgpack.Ext) for k, _ in items):  # an Ext cannot be a key
            return msgspec.msgpack.Ext(_SURROGATE_MAP, _encoder.encode([list(i) for i in items]))
        return dict(items)
    if isinstance(value, (list, tuple)):
        return [_escape_surrogates(v) for v in value]
    return value


def encode(value: Any, path: str, what: str) -> bytes:
    """msgpack bytes of ``value``, or ``StoreError`` saying why it cannot be stored."""
    try:
        return _encoder.encode(value)
    except UnicodeEncodeError:
        pass  # lone surrogates (surrogateescape'd tool output): stored losslessly below
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise StoreError(path, f"{what} cannot be encoded (nothing was written): {exc}") from None
    try:
        builtins = msgspec.to_builtins(value, builtin_types=(bytes, bytearray, memoryview))
        return _encoder.encode(_escape_surrogates(builtins))
    except (TypeError, ValueError, OverflowError, RecursionError, UnicodeError) as exc:
        raise StoreError(path, f"{what} cannot be encoded (nothing was written): {exc}") from None


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == _SURROGATE_TEXT:
        return bytes(data).decode("utf-8", "surrogatepass")
    if code == _SURROGATE_MAP:
        return dict(_decoder.decode(data))
    raise ValueError(f"unknown msgpack extension {code}")


_decoder = msgspec.msgpack.Decoder(ext_hook=_ext_hook)


def decode_result(blob: bytes) -> DurableResult:
    result = msgspec.convert(_decoder.decode(blob), DurableResult)
    if isinstance(result.content, list):  # msgpack has no tuple; content blocks are a tuple
        result = msgspec.structs.replace(result, content=tuple(result.content))
    return result


def calls_from_rows(rows: Iterable[Sequence[Any]], path: str) -> list[StoredCall]:
    """``StoredCall`` s of (execution_id, call_id, turn_id, epoch, seq, tool_name, args, result)
    rows in write order, sorted by turn (where its first record was written), epoch, position."""
    calls: list[tuple[tuple[int, int, int, int], StoredCall]] = []
    turn_order: dict[str | None, int] = {}
    for index, (execution_id, call_id, turn_id, epoch, seq, tool_name, args, result) in enumerate(
        rows
    ):
        try:
            decoded_args = _decoder.decode(args)
            durable = None if result is None else decode_result(result)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            raise StoreError(
                path, f"the record of {execution_id!r} cannot be decoded: {exc}"
            ) from None
        call = StoredCall(
            call_id,
            execution_id,
            tool_name,
            decoded_args,
            "interrupted" if durable is None else "completed",
            durable,
            turn_id,
            epoch,
            seq,
        )
        turn = turn_order.setdefault(turn_id, len(turn_order))
        calls.append(((turn, epoch, seq, index), call))
    calls.sort(key=lambda pair: pair[0])
    return [call for _, call in calls]
