"""What an upload may carry: files with the endings the app takes, each no larger than :data:`MAX_UPLOAD_BYTES`.

The guard (:mod:`explorer.ui.serving.guard`) watches an upload as it streams in and stops it at the first
file it would refuse. The body is read part by part with the same multipart parser Gradio stores
uploads with (``python-multipart``), so the file name judged here is the name Gradio would store:
a pattern over the raw bytes misses spellings the parser accepts (``filename ="x.html"``, with a
space or a tab before ``=``). Anything the parser cannot read is refused too, never passed on.

The one file input of the page is the question file; the page reads the first 200 questions of
a file, so a few megabytes is already far more than it uses, and :data:`MAX_UPLOAD_BYTES` keeps a
visitor from filling the server's disk with one upload.
"""

from __future__ import annotations

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

#: The largest file one upload may carry.
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
#: Room for the multipart framing (boundaries, part headers) around the files of one upload.
FRAMING_BYTES = 64 * 1024


def size_text(size: int) -> str:
    return f"{size / (1024 * 1024):.0f} MB"


class UploadRefused(Exception):
    """Why an upload is refused: the HTTP status and a message saying what, where and how to fix it."""

    def __init__(self, status: int, message: str, name: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.name = status, message, name


def _decode(raw: bytes, charset: str) -> str:
    """A header value as Gradio decodes it (its charset, else latin-1)."""
    try:
        return raw.decode(charset)
    except (LookupError, UnicodeDecodeError):
        return raw.decode("latin-1")


def too_large(limit: int = MAX_UPLOAD_BYTES) -> UploadRefused:
    return UploadRefused(413, f"upload: the file is larger than {size_text(limit)}, the most this app takes Fix: "
                              "the page reads the first 200 questions of a file, so keep those in a smaller file "
                              "(or run the whole file from the command line: python -m explorer eval --dataset "
                              "FILE)")


class UploadCheck:
    """Feed an upload's body chunk by chunk; :meth:`feed` raises :class:`UploadRefused` at the first file
    whose name does not end in one of ``suffixes`` (None: any name) or whose size passes ``limit``."""

    def __init__(self, content_type: bytes | str, suffixes: tuple[str, ...] | None,
                 limit: int = MAX_UPLOAD_BYTES) -> None:
        self.suffixes, self.limit = suffixes, limit
        _, params = parse_options_header(content_type)
        charset = params.get(b"charset", b"utf-8")
        self.charset = charset.decode("latin-1")
        boundary = params.get(b"boundary")
        if not boundary:
            raise UploadRefused(400, "upload: the request is not a multipart form with a boundary Fix: send the "
                                     "file as multipart/form-data, as a browser's file input does")
        self._field, self._value, self._disposition = b"", b"", b""
        self._file_size: int | None = None  # bytes of the current part, when it is a file
        self._problem: UploadRefused | None = None
        self._parser = MultipartParser(boundary, {
            "on_part_begin": self._part_begin, "on_header_field": self._header_field,
            "on_header_value": self._header_value, "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished, "on_part_data": self._part_data})

    def feed(self, chunk: bytes) -> None:
        try:
            self._parser.write(chunk)
        except MultipartParseError:
            if self._problem is None:
                raise UploadRefused(400, "upload: the multipart body cannot be read Fix: send the file as "
                                         "multipart/form-data, as a browser's file input does") from None
        if self._problem is not None:
            raise self._problem

    # -- the parser's callbacks ----------------------------------------------------------------------------
    def _part_begin(self) -> None:
        self._disposition, self._file_size = b"", None

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        if self._field.lower() == b"content-disposition":
            self._disposition = self._value
        self._field, self._value = b"", b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if b"filename" not in options:
            return  # a form field, not a file
        self._file_size = 0
        name = _decode(options[b"filename"], self.charset)
        if self.suffixes is not None and (not name or not name.lower().endswith(self.suffixes)):
            shown = f"'{name[:120]}'" if name else "a file without a name"
            self._stop(UploadRefused(403, f"upload: {shown} is not a file this app takes Fix: choose a file "
                                          f"ending in {', '.join(self.suffixes)}", name))

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._file_size is None:
            return
        self._file_size += end - start
        if self._file_size > self.limit:
            self._stop(too_large(self.limit))

    def _stop(self, problem: UploadRefused) -> None:
        if self._problem is None:
            self._problem = problem
