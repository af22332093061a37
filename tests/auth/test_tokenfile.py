"""Token files in kube-apiserver's --token-auth-file format: parsing, clear errors that never show a token."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import structlog

from federator.apiserver.app import Principal
from federator.apiserver.auth import TokenAuthenticator, TokenFileError, parse_token_file

GOOD = """\
# token,user,uid,"groups"
admin-token-0123456789abcdef,alice,uid-1,"federator:admin"
researcher-token-0123456789ab,bob,uid-2,"federator:researcher,ns:default,ns:vision"

viewer-token-0123456789abcdef,carol,uid-3,federator:viewer
nogroups-token-0123456789abcd,dave,uid-4
"""


def test_parses_kube_token_file_format() -> None:
    rows = parse_token_file(GOOD)
    assert [(p.name, uid, line) for _, p, uid, line in rows] == [
        ("alice", "uid-1", 2), ("bob", "uid-2", 3), ("carol", "uid-3", 5), ("dave", "uid-4", 6)
    ]
    assert rows[1][1] == Principal(name="bob", groups=("federator:researcher", "ns:default", "ns:vision"))
    assert rows[3][1].groups == ()
    auth = TokenAuthenticator.from_text(GOOD)
    assert len(auth) == 4
    assert auth.principal_for_token("researcher-token-0123456789ab") == rows[1][1]
    assert auth.principal_for_token("researcher-token-0123456789aX") is None
    assert auth.principal_for_token("") is None


SECRET = "sekrit-token-do-not-print-4711"

BAD_FILES: list[tuple[str, str, str]] = [
    ("too-few-columns", f"{SECRET},alice\n", "line 1: expected at least 3 columns"),
    ("too-many-columns", f"{SECRET},alice,uid,federator:admin,ns:default\n", "line 1: expected at most 4 columns"),
    ("empty-token", ",alice,uid-1\n", "line 1: column 1 (token) is empty"),
    ("token-with-space", f"{SECRET} x,alice,uid-1\n", "line 1: column 1 (token) must be"),
    ("empty-user", f"{SECRET},,uid-1\n", "line 1: column 2 (user name) is empty"),
    ("empty-uid", f"{SECRET},alice,\n", "line 1: column 3 (uid) is empty"),
    ("duplicate-token", f"{SECRET},alice,uid-1\n{SECRET},bob,uid-2\n", "line 2: the token repeats the one on line 1"),
    ("duplicate-user", f"{SECRET},alice,uid-1\nother-token-xxxxxxxxxxxx,alice,uid-2\n",
     "line 2: user 'alice' already has a token on line 1"),
    ("researcher-without-namespace", f'{SECRET},bob,uid-2,"federator:researcher"\n',
     "line 1: user 'bob' is a researcher but has no namespace; add a group like ns:default"),
    ("bad-namespace", f'{SECRET},bob,uid-2,"federator:researcher,ns:Not_A_Namespace"\n',
     "line 1: group ns:Not_A_Namespace does not name a valid namespace"),
    ("unterminated-quote", f'{SECRET},bob,uid-2,"federator:viewer\n', "line 1: not valid CSV"),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_parse_errors_are_clear_and_never_show_the_token(text: str, expected: str) -> None:
    with pytest.raises(TokenFileError) as caught:
        parse_token_file(text, source="token file /etc/tokens.csv")
    message = str(caught.value)
    assert message.startswith("token file /etc/tokens.csv: ")
    assert expected in message
    assert SECRET not in message and "sekrit" not in message


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read it"):
        TokenAuthenticator.from_file(tmp_path / "missing.csv")
    with pytest.raises(TokenFileError, match="not a regular file"):
        TokenAuthenticator.from_file(tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("# nobody yet\n\n")
    with pytest.raises(TokenFileError, match="has no tokens"):
        TokenAuthenticator.from_file(empty)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe" + SECRET.encode() + b",a,b\n")
    with pytest.raises(TokenFileError, match="not UTF-8") as caught:
        TokenAuthenticator.from_file(binary)
    assert SECRET not in str(caught.value)


def test_loose_permissions_and_short_tokens_are_warned_about_without_the_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.csv"
    path.write_text(f"{SECRET},alice,uid-1,federator:admin\ntiny7,bob,uid-2,federator:viewer\n")
    os.chmod(path, 0o644)
    with structlog.testing.capture_logs() as logs:
        auth = TokenAuthenticator.from_file(path, logger=structlog.get_logger())
    assert len(auth) == 2
    events = [entry["event"] for entry in logs]
    assert "token file is readable by other users" in events
    assert "short token in token file" in events
    assert SECRET not in repr(logs) and "tiny7" not in repr(logs)
