"""Webhook URLs (a request's ``notify``, the ``notify_url`` setting): what is accepted, checked in one place."""

from __future__ import annotations

from urllib.parse import urlsplit

from .errors import ValidationError

#: The longest URL accepted.
MAX_URL = 2000


def check_webhook(url: object, what: str = "notify") -> str:
    """``url`` if it is an http or https URL with a host, else a ValidationError naming ``what`` and the value."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL or any(c.isspace() or ord(c) < 32 for c in url):
        raise ValidationError(
            f"{what} {url!r} is not a URL: give http(s)://host[:port]/path (at most {MAX_URL} bytes)", field=what
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise ValidationError(f"{what} {url!r} is not a URL: {exc}", field=what) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(f"{what} {url!r} is not an http(s) URL with a host", field=what)
    return url
