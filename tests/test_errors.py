"""Secrets and redaction (stackedheads.errors). That no secret reaches a file or the screen
end to end: tests/test_llm.py, tests/test_reproduce.py, tests/test_cli.py."""

from __future__ import annotations

from stackedheads.errors import public_url, redact, register_secret


def test_redact_key_headers_and_url_credentials():
    register_secret("sk-unit-ABCDEFG")
    text = redact("{'Authorization': 'Bearer sk-unit-ABCDEFG', 'api-key': 'zzz1234'} http://u:p4ss@h/v1")
    assert "sk-unit-ABCDEFG" not in text and "zzz1234" not in text and "p4ss" not in text
    assert public_url("http://me:pw-XYZ12345@127.0.0.1:8/v1") == "http://127.0.0.1:8/v1"
    assert "pw-XYZ12345" not in redact("the password pw-XYZ12345 echoed")
    assert redact("answer: 42, author: bob") == "answer: 42, author: bob"  # ordinary text kept
    register_secret("EMPTY")  # a local server's placeholder key is no secret: text stays intact
    assert redact("EMPTY cells") == "EMPTY cells"
