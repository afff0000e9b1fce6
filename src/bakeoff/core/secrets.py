"""Credentials stay off the screen and out of every record: a URL's user info and key-like query values.

    scrub("HTTPError at http://ana:s3cret@host/api?api-key=k1")   # 'HTTPError at http://ana:***@host/api?api-key=***'
    credential_in("https://host/v1?key=abc")                       # 'a key-like query value (key=)'
    move_tracking_credentials()   # MLFLOW_TRACKING_URI=http://u:p@h → MLFLOW_TRACKING_USERNAME/PASSWORD, URI without

bakeoff.core.runs scrubs every failure reason before it is recorded; importing ``bakeoff`` moves MLflow's
credentials out of its URI, so neither MLflow's own "View run at …" links nor a traceback can print them.
"""

from __future__ import annotations

import os
import re
import sys
from urllib.parse import urlsplit

# scheme://user:password@  or  scheme://token@  (the part before @ of a URL's authority)
USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<info>[^/\s@]+)@")
# ?api-key=… &token=… : a query parameter whose name says it carries a secret
KEY_QUERY = re.compile(
    r"(?P<name>[?&](?:api[-_]?key|apikey|key|token|access[-_]?token|auth|password|passwd|secret|"
    r"sig|signature|code)=)[^&\s#'\"]+",
    re.IGNORECASE,
)


def scrub(text: str) -> str:
    """``text`` with every URL's password (or lone token) and every key-like query value replaced by ``***``; a user
    name before a password is kept (it says which account)."""
    if not text:
        return text

    def info(m: re.Match) -> str:
        user, colon, _ = m["info"].partition(":")
        return f"{m['scheme']}{user + ':' if colon else ''}***@"

    return KEY_QUERY.sub(lambda m: m["name"] + "***", USERINFO.sub(info, str(text)))


def credential_in(url: str | None) -> str | None:
    """What in ``url`` is a credential (user info, a key-like query value), in words; None where nothing is."""
    if not url or "://" not in url:
        return None
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return "user info (user:password@)" if ":" in parts.netloc.rsplit("@", 1)[0] else "user info (token@)"
    m = KEY_QUERY.search("?" + parts.query) if parts.query else None
    return f"a key-like query value ({m['name'][1:]})" if m else None


def move_tracking_credentials(environ=os.environ, say=True) -> str | None:
    """Where ``MLFLOW_TRACKING_URI`` carries ``user:password@``, hand them to MLflow the supported way
    (``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``, unless already set) and leave the URI without them,
    for this process and every stage it starts. Returns the URI as now set (None: nothing to move)."""
    uri = environ.get("MLFLOW_TRACKING_URI") or ""
    if "://" not in uri:
        return None
    parts = urlsplit(uri)
    info, at, host = parts.netloc.rpartition("@")
    if not at:
        return None
    user, _, password = info.partition(":")
    environ.setdefault("MLFLOW_TRACKING_USERNAME", user)
    if password:
        environ.setdefault("MLFLOW_TRACKING_PASSWORD", password)
    environ["MLFLOW_TRACKING_URI"] = parts._replace(netloc=host).geturl()
    if say:
        print(
            f"note: MLFLOW_TRACKING_URI held credentials; they now go to MLflow as MLFLOW_TRACKING_USERNAME and "
            f"MLFLOW_TRACKING_PASSWORD, and the URI is {environ['MLFLOW_TRACKING_URI']} (set those two variables "
            "yourself to silence this)",
            file=sys.stderr,
        )
    return environ["MLFLOW_TRACKING_URI"]
