"""Every route's JSON body through one door: decoded by msgspec, refused with a 4xx naming the
place when hostile, in bounded time and memory.

msgspec already refuses NaN/Infinity literals, numbers beyond a double (`1e999`), lone
surrogates and truncated input; nesting deeper than its recursion guard raises RecursionError,
which is a 400 here, not a 500. Integers, though, decode unbounded, and one beyond 64 bits would
reach the wire encoder (msgpack) and fail there: they are found here and named.
"""

from __future__ import annotations

from typing import Any

import msgspec

from vla_server.errors import RequestError, from_msgspec

INT64 = (-(2**63), 2**63 - 1)


def decode_json(body: bytes) -> Any:
    """The body's JSON value; a malformed, too deeply nested or out-of-range body is a 400."""
    try:
        value = msgspec.json.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise from_msgspec(e) from None
    except RecursionError:
        raise RequestError("JSON is nested too deeply", "body") from None
    check_int_range(value)
    return value


def check_int_range(value: Any, path: str = "") -> None:
    """Raise naming the first integer outside int64. Iterative (the depth is msgspec's), and it
    visits JSON values, not bytes: a camera frame is one string, a token list one loop."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, v = stack.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            if type(x) is int and INT64[0] <= x <= INT64[1]:
                continue  # the common case, checked first
            if type(x) is int or isinstance(x, dict | list):
                key = f"[{k}]" if isinstance(k, int) else f".{k}" if where else str(k)
                stack.append((where + key, x))
        if type(v) is int and not INT64[0] <= v <= INT64[1]:
            raise RequestError(f"{v} is outside the 64-bit integer range", where or "body")
