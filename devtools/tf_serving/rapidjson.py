"""What TF Serving's JSON layer does with a request body, per server version: parse it (RapidJSON
1.1.0 as tensorflow_serving/util/json_tensor.cc ParseJson drives it), quote a JSON value in an
error message (JsonValueToString at 2.16.1, JsonValueToDebugString at 2.20.0) and decode a b64
string (absl::Base64Unescape). Sources: tensorflow/serving at the tags 2.16.1 and 2.20.0
(RapidJSON pinned at v1.1.0 in tensorflow_serving/workspace.bzl at both), abseil-cpp 20230802
absl/strings/escaping.cc Base64UnescapeInternal.
"""
from __future__ import annotations

import base64
import json
import math
import re
from decimal import Decimal
from typing import Optional, Tuple

from core.config import TF_SERVING_VERSIONS

# The releases the config allows (serving.tf_serving_version), the default first.
SERVER_VERSIONS = TF_SERVING_VERSIONS
DEFAULT_SERVER_VERSION = TF_SERVING_VERSIONS[0]

_WHITESPACE = " \n\r\t"  # RapidJSON SkipWhitespace
# json_tensor.cc at 2.20.0: JsonValueToDebugString stops writing once this many bytes are out.
_MAX_DEBUG_BYTES = 256


def check_version(server_version: str) -> str:
    if server_version not in SERVER_VERSIONS:
        raise ValueError(f"unknown TF Serving version {server_version!r}; the stand-in knows "
                         f"{SERVER_VERSIONS}")
    return server_version


class ParseError(ValueError):
    """The body is not one JSON document as the server reads it; str() is the server's text."""


def parse_body(raw: bytes, server_version: str) -> Tuple[object, int]:
    """(the document, the byte offset where it ends), as json_tensor.cc ParseJson reads it:
    - an empty body: "JSON Parse error: The document is empty" (ParseJson's own check, both tags);
    - only whitespace: RapidJSON's kParseErrorDocumentEmpty, "The document is empty." at the
      offset where the whitespace ends;
    - data after the document: 2.16.1 parses with kParseNanAndInfFlag only, so RapidJSON's
      kParseErrorDocumentRootNotSingular "The document root must not be followed by other
      values." at its offset; 2.20.0 adds kParseStopWhenDoneFlag (and kParseIterativeFlag), so
      whatever follows the first document is never read;
    - NaN and Infinity are numbers (kParseNanAndInfFlag, both tags), as in Python's parser.
    Other syntax errors keep Python's wording after "JSON Parse error: " (a known gap: RapidJSON
    words them "Invalid value." and the like)."""
    check_version(server_version)
    if not raw:
        raise ParseError("JSON Parse error: The document is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ParseError(f"JSON Parse error: {error}") from None
    start = _skip_whitespace(text, 0)
    if start == len(text):
        raise ParseError(f"JSON Parse error: The document is empty. at offset: {len(raw)}")
    try:
        document, end = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as error:
        raise ParseError(f"JSON Parse error: {error}") from None
    after = _skip_whitespace(text, end)
    if after < len(text) and server_version == "2.16.1":
        raise ParseError("JSON Parse error: The document root must not be followed by other "
                         f"values. at offset: {len(text[:after].encode())}")
    return document, len(text[:end].encode())


def _skip_whitespace(text: str, index: int) -> int:
    while index < len(text) and text[index] in _WHITESPACE:
        index += 1
    return index


def quote(value, server_version: str) -> str:
    """A JSON value as the server's error messages quote it (json_tensor.cc).

    2.16.1 JsonValueToString: RapidJSON's PrettyWriter (4-space indent, one array element per
    line), a top-level float written by WriteDecimal (absl::StrCat, six digits, ".0" added).
    2.20.0 JsonValueToDebugString: the PrettyWriter with kFormatSingleLineArray (`[1, 2]`),
    every number through the writer, and nothing written once 256 bytes are out
    (JsonWriterWithLimit, kMaxJsonDebugStringBytes)."""
    check_version(server_version)
    if server_version == "2.16.1" and isinstance(value, float):
        return _write_decimal(value)
    writer = _PrettyWriter(single_line_array=server_version == "2.20.0",
                           limit=_MAX_DEBUG_BYTES if server_version == "2.20.0" else None)
    writer.value(value)
    return "".join(writer.out)


class _Stop(Exception):
    """The writer refused an event (a NaN through Writer::Double, or 2.20.0's byte limit)."""


class _PrettyWriter:
    """rapidjson/prettywriter.h 1.1.0 (PrettyPrefix, EndObject, EndArray), writer.h String and
    Double (internal/dtoa.h Prettify); an event refused ends the output where it is, as
    Value::Accept returns at the first handler that fails."""

    def __init__(self, single_line_array: bool, limit: Optional[int]):
        self.single_line, self.limit = single_line_array, limit
        self.out, self.size, self.stack = [], 0, []  # stack: [in_array, value_count]

    def value(self, value) -> None:
        try:
            self._value(value)
        except _Stop:
            pass

    def _write(self, text: str) -> None:
        self.out.append(text)
        self.size += len(text.encode())

    def _event(self) -> None:
        if self.limit is not None and self.size >= self.limit:  # JsonWriterWithLimit::InLimit
            raise _Stop

    def _prefix(self) -> None:
        if not self.stack:
            return
        level = self.stack[-1]
        if level[0]:
            if level[1] > 0:
                self._write(", " if self.single_line else ",")
            if not self.single_line:
                self._write("\n" + " " * 4 * len(self.stack))
        else:
            if level[1] > 0:
                self._write(",\n" if level[1] % 2 == 0 else ": ")
            else:
                self._write("\n")
            if level[1] % 2 == 0:
                self._write(" " * 4 * len(self.stack))
        level[1] += 1

    def _value(self, value) -> None:
        self._event()
        if isinstance(value, dict):
            self._prefix()
            self._write("{")
            self.stack.append([False, 0])
            for key, item in value.items():
                self._event()
                self._prefix()
                self._write(_string(key))
                self._value(item)
            self._event()
            empty = self.stack.pop()[1] == 0
            self._write("}" if empty else "\n" + " " * 4 * len(self.stack) + "}")
        elif isinstance(value, list):
            self._prefix()
            self._write("[")
            self.stack.append([True, 0])
            for item in value:
                self._value(item)
            self._event()
            empty = self.stack.pop()[1] == 0
            close = "]" if empty or self.single_line else "\n" + " " * 4 * len(self.stack) + "]"
            self._write(close)
        else:
            if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)
                                            and not -2**63 <= value < 2**64):
                text = _dtoa(float(value))
                if text is None:  # Writer::Double without kWriteNanAndInfFlag: false
                    raise _Stop
            elif isinstance(value, str):
                text = _string(value)
            else:
                text = {None: "null", True: "true", False: "false"}.get(value, None) \
                    if isinstance(value, bool) or value is None else str(value)
            self._prefix()
            self._write(text)


def _string(text: str) -> str:
    """writer.h WriteString: '"' and '\\' escaped, control characters as \\b \\f \\n \\r \\t or
    \\u00XX (upper-case hex); '/' and non-ASCII as they are."""
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
             "\t": "\\t"}
    return '"' + "".join(short.get(c) or (f"\\u{ord(c):04X}" if ord(c) < 0x20 else c)
                         for c in text) + '"'


def _dtoa(value: float) -> Optional[str]:
    """internal/dtoa.h dtoa with Prettify (maxDecimalPlaces 324), the digits being Python's
    shortest round trip (Grisu2's, but for rare doubles where Grisu2 gives one digit more)."""
    if not math.isfinite(value):
        return None
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    parts = Decimal(repr(abs(value))).as_tuple()
    written = "".join(map(str, parts.digits))
    digits = written.rstrip("0")
    k = parts.exponent + len(written) - len(digits)  # the value is digits * 10**k
    length = len(digits)
    kk = length + k
    if 0 <= k and kk <= 21:
        text = digits + "0" * k + ".0"
    elif 0 < kk <= 21:
        text = digits[:kk] + "." + digits[kk:]
    elif -6 < kk <= 0:
        text = "0." + "0" * -kk + digits
    elif kk < -324:
        text = "0.0"
    elif length == 1:
        text = f"{digits}e{kk - 1}"
    else:
        text = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return sign + text


def _write_decimal(value: float) -> str:
    """json_tensor.cc at 2.16.1 WriteDecimal<float> (the value fits a float: RapidJSON's
    IsFloat) or <double>: absl::StrCat's six digits, full precision (%.9g / %.17g) when they do
    not round-trip, ".0" added to a whole number; NaN, Infinity, -Infinity."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "-Infinity" if value < 0 else "Infinity"
    import struct

    is_float = -3.4028234e38 <= value <= 3.4028234e38
    as_float = struct.unpack("f", struct.pack("f", value))[0] if is_float else value
    text = f"{as_float:g}"
    back = float(text)
    if is_float:
        back = struct.unpack("f", struct.pack("f", back))[0]
    if back != as_float:
        text = f"{as_float:.9g}" if is_float else f"{as_float:.17g}"
    if "." not in text and "e" not in text:
        text += ".0"
    return text


_BASE64 = re.compile(r"[A-Za-z0-9+/]*")
_ABSL_SPACE = " \t\n\v\f\r"  # absl::ascii_isspace


def absl_base64_unescape(text: str) -> Optional[bytes]:
    """absl::Base64Unescape (json_tensor.cc JsonDecodeBase64Object, both tags): whitespace is
    skipped; padding ('=' or '.') is optional but, when present, exactly what the data's length
    asks for, and nothing but whitespace after it; one data character left over is an error.
    None where absl returns false (the server answers "Unable to base64 decode")."""
    data = "".join(c for c in text if c not in _ABSL_SPACE)
    pad_at = min([i for i in (data.find("="), data.find(".")) if i >= 0], default=len(data))
    body, tail = data[:pad_at], data[pad_at:]
    if not _BASE64.fullmatch(body) or set(tail) - {"=", "."}:
        return None
    state = len(body) % 4
    if state == 1:
        return None
    expected = {0: 0, 2: 2, 3: 1}[state]
    if len(tail) not in (0, expected):
        return None
    return base64.b64decode(body + "=" * ((4 - state) % 4))
