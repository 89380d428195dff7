"""How the stores write arguments and results: msgpack (msgspec), with text UTF-8 cannot encode
kept losslessly, and any JSON value the pipeline admits kept whole (integers past 64 bits, any
depth); and how a session's rows become ``StoredCall`` s in model order."""

from __future__ import annotations

import secrets
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from fastgate.durable.store import StoredCall, StoreError
from fastgate.model.results import DurableResult

# -- encoding --------------------------------------------------------------------------------------

# msgpack extensions, used only for text UTF-8 cannot encode (lone surrogates, e.g. from
# surrogateescape'd tool output): such a str, and a map with such a key (as [key, value] pairs).
_SURROGATE_TEXT, _SURROGATE_MAP = 1, 2
# And for what msgpack cannot hold, though JSON can and validation admits it: an integer past 64
# bits (its two's complement bytes), and a value nested past the encoder's depth, written flat:
# one extension holding the value's items in order, each array or object a marker with its
# length followed by its items (an object's as key, value), so no depth is ever recursed into.
_BIG_INT, _FLAT, _FLAT_ARRAY, _FLAT_MAP = 3, 4, 5, 6
_encoder = msgspec.msgpack.Encoder()
_length = struct.Struct(">I")


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
    except (OverflowError, RecursionError):
        return _encode_flat(value, path, what)
    except (TypeError, ValueError) as exc:
        raise StoreError(path, f"{what} cannot be encoded (nothing was written): {exc}") from None
    try:
        builtins = msgspec.to_builtins(value, builtin_types=(bytes, bytearray, memoryview))
        return _encoder.encode(_escape_surrogates(builtins))
    except (OverflowError, RecursionError):
        return _encode_flat(value, path, what)
    except (TypeError, ValueError, UnicodeError) as exc:
        raise StoreError(path, f"{what} cannot be encoded (nothing was written): {exc}") from None


def _encode_flat(value: Any, path: str, what: str) -> bytes:
    try:
        return _encoder.encode(msgspec.msgpack.Ext(_FLAT, _encoder.encode(_flat_items(value))))
    except (TypeError, ValueError, OverflowError, RecursionError, UnicodeError) as exc:
        raise StoreError(path, f"{what} cannot be encoded (nothing was written): {exc}") from None


def _flat_items(value: Any) -> list[Any]:
    """``value``'s items in order, each container a marker and its length (iterative)."""
    items: list[Any] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, msgspec.Struct):
            item = _struct_fields(item)
        if isinstance(item, Mapping):
            items.append(msgspec.msgpack.Ext(_FLAT_MAP, _length.pack(len(item))))
            for key, child in reversed(list(item.items())):
                stack.append(child)
                stack.append(key)
        elif isinstance(item, (list, tuple)):
            items.append(msgspec.msgpack.Ext(_FLAT_ARRAY, _length.pack(len(item))))
            stack.extend(reversed(item))
        elif isinstance(item, int) and not isinstance(item, bool):
            in_range = -(2**63) <= item < 2**64
            items.append(item if in_range else msgspec.msgpack.Ext(_BIG_INT, _int_bytes(item)))
        elif isinstance(item, str):
            items.append(_escape_surrogates(item))
        elif item is None or isinstance(item, (bool, float, bytes)):
            items.append(item)
        elif isinstance(item, (bytearray, memoryview)):
            items.append(bytes(item))
        else:  # a leaf msgspec knows (an enum, a date, ...)
            items.append(msgspec.to_builtins(item, builtin_types=(bytes, bytearray, memoryview)))
    return items


def _struct_fields(value: msgspec.Struct) -> dict[str, Any]:
    """A struct as msgspec writes it: its fields, and its tag where it has one."""
    fields = msgspec.structs.asdict(value)
    config = value.__struct_config__
    if config.tag_field is not None:
        fields = {config.tag_field: config.tag, **fields}
    return fields


def _int_bytes(value: int) -> bytes:
    return value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True)


def _unflatten(items: list[Any]) -> Any:
    """The value ``_flat_items`` wrote (iterative)."""
    root: list[Any] = []
    # Each open container: (the container, the items it still takes, the key awaiting a value).
    open_: list[list[Any]] = [[root, 1, None]]
    for item in items:
        if isinstance(item, _Open):
            value: Any = {} if item.is_map else []
            taken = item.size * 2 if item.is_map else item.size
        else:
            value, taken = item, 0
        frame = open_[-1]
        container = frame[0]
        if isinstance(container, dict):
            if frame[2] is _NO_KEY:
                frame[2] = value  # a key; its value comes next
            else:
                container[frame[2]] = value
                frame[2] = _NO_KEY
        else:
            container.append(value)
        frame[1] -= 1
        if taken:
            open_.append([value, taken, _NO_KEY])
        while len(open_) > 1 and open_[-1][1] == 0:
            open_.pop()
    if len(open_) > 1 or len(root) != 1:  # a damaged row: read as unreadable, not half a value
        raise ValueError("a flat value that ends early or runs on")
    return root[0]


class _Open:
    """An array's or an object's marker in a flat value."""

    __slots__ = ("is_map", "size")

    def __init__(self, is_map: bool, size: int) -> None:
        self.is_map = is_map
        self.size = size


_NO_KEY = object()


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == _SURROGATE_TEXT:
        return bytes(data).decode("utf-8", "surrogatepass")
    if code == _SURROGATE_MAP:
        return dict(_decoder.decode(data))
    if code == _BIG_INT:
        return int.from_bytes(data, "big", signed=True)
    if code in (_FLAT_ARRAY, _FLAT_MAP):
        return _Open(code == _FLAT_MAP, _length.unpack(data)[0])
    if code == _FLAT:
        return _unflatten(_decoder.decode(data))
    raise ValueError(f"unknown msgpack extension {code}")


_decoder = msgspec.msgpack.Decoder(ext_hook=_ext_hook)


def decode_result(blob: bytes) -> DurableResult:
    result = msgspec.convert(_decoder.decode(blob), DurableResult)
    if isinstance(result.content, list):  # msgpack has no tuple; content blocks are a tuple
        result = msgspec.structs.replace(result, content=tuple(result.content))
    return result


def new_writer() -> int:
    """A store's writer number, noted with each tool-use it writes (see ``recovered_order``)."""
    return secrets.randbits(63)


def calls_from_rows(rows: Iterable[Sequence[Any]], path: str) -> list[StoredCall]:
    """``StoredCall`` s of (execution_id, call_id, turn_id, epoch, seq, tool_name, args, result,
    writer) rows in write order, in recovered order (see ``recovered_order``)."""
    calls: list[tuple[StoredCall, Any]] = []
    for execution_id, call_id, turn_id, epoch, seq, tool_name, args, result, writer in rows:
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
        calls.append((call, writer))
    return recovered_order(calls)


def recovered_order(calls: Sequence[tuple[StoredCall, Any]]) -> list[StoredCall]:
    """A session's calls, given in write order with the store that wrote each, in the order
    they were made: by turn (where its first record was written), epoch, then position.

    A position (``seq``) is the recording process's own: it orders that writer's records (a
    stream's calls in model order, whatever order their records committed in), but two hosts'
    clocks, and so their positions, cannot be compared. Across writers the write order decides:
    each writer's records keep their own order, and each counts as written when the first of it
    and its successors (by position) was, so that a record written after another writer's was
    acknowledged comes after it. Rows without a writer (written before stores noted theirs) are
    one writer, ordered by position as they always were. ``seq`` comes back raised where needed
    so that positions are distinct and increase in this order."""
    turn_rank: dict[str | None, int] = {}
    groups: dict[tuple[int, int], dict[Any, list[tuple[int, int, StoredCall]]]] = {}
    for index, (call, writer) in enumerate(calls):
        turn = turn_rank.setdefault(call.turn_id, len(turn_rank))
        group = groups.setdefault((turn, call.epoch), {})
        group.setdefault(writer, []).append((call.seq, index, call))
    ordered: list[StoredCall] = []
    for place in sorted(groups):
        merged: list[tuple[int, int, int, StoredCall]] = []
        for records in groups[place].values():
            records.sort(key=lambda record: (record[0], record[1]))
            written = len(calls)
            for seq, index, call in reversed(records):
                written = min(written, index)
                merged.append((written, seq, index, call))
        merged.sort(key=lambda record: record[:3])
        last: int | None = None
        for _, seq, _, call in merged:
            position = seq if last is None else max(seq, last + 1)
            if position != call.seq:
                call = msgspec.structs.replace(call, seq=position)
            ordered.append(call)
            last = position
    return ordered
