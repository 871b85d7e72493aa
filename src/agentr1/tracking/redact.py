"""Credentials never reach a log line, an error message, a tag or a Prefect artifact."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_uri(uri: str) -> str:
    """``uri`` with any ``user:password@`` credentials replaced by ``***@``
    (``http://u:p@host:5000/x`` -> ``http://***@host:5000/x``); other URIs unchanged. Text that
    merely contains such a URI (an exception message) is redacted too."""
    if "@" not in uri:
        return uri
    parts = urlsplit(uri)
    if parts.scheme and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))
    import re

    return re.sub(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@", r"\1***@", uri)
