"""A failed setup says why in its first line: the TLS or network error, pip's first ERROR, npm's error
code, never the installers' closing boilerplate ("See above for output", a log path inside a
container that is gone)."""

from __future__ import annotations

import pytest

from sandbox.session.setup import setup_cause

PIP_TLS = """Looking in indexes: https://pypi.org/simple
WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:1006)"))': /simple/six/
ERROR: Could not find a version that satisfies the requirement six (from versions: none)
ERROR: No matching distribution found for six
"""
NPM_TLS = """npm ERR! code SELF_SIGNED_CERT_IN_CHAIN
npm ERR! errno SELF_SIGNED_CERT_IN_CHAIN
npm ERR! request to https://registry.npmjs.org/left-pad failed, reason: self-signed certificate in certificate chain

npm ERR! A complete log of this run can be found in: /tmp/.npm/_logs/2026-12-03T00_00_00_000Z-debug-0.log
"""
PIP_BUILD = """  Building wheel for mypkg (pyproject.toml) ... error
  error: subprocess-exited-with-error
  note: This error originates from a subprocess, and is likely not a problem with pip.
  ERROR: Failed building wheel for mypkg
See above for output.
"""
PROXY = "ERROR: HTTP error 403 while getting https://example.invalid/x.whl\nharness egress proxy: example.invalid:443 is not on the session's --allow-net list\n"


@pytest.mark.parametrize(
    "output, says",
    [
        (PIP_TLS, "CERTIFICATE_VERIFY_FAILED"),
        (NPM_TLS, "npm ERR! code SELF_SIGNED_CERT_IN_CHAIN"),
        (PIP_BUILD, "ERROR: Failed building wheel for mypkg"),
        (PROXY, "harness egress proxy: example.invalid:443 is not on the session's --allow-net list"),
        ("", "no output"),
    ],
)
def test_the_first_line_says_the_cause(output, says):
    line = setup_cause(output)
    assert says in line and "See above" not in line and "complete log" not in line
