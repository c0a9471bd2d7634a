"""TLS on the OpenAI-compatible HTTP API (issue #17): --http_port with
--tls_cert_file / --tls_key_file serves HTTPS, and --tls_client_ca_file also
requires a client certificate signed by that CA (mTLS) -- the gRPC port's
rules, from the same flags (test_auth_tls.py checks the gRPC side).

Driven by the `openai` client over httpx, with Python's ssl contexts; the
certificates are kf.make_test_certs' (a CA, another CA, a server certificate
for 127.0.0.1 and localhost, a client certificate from each CA).
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
from pathlib import Path

import grpc
import httpx
import openai
import pytest

import kvserve_fixtures as kf
from kvserve_fixtures import stream, text_request

pb2, pb2_grpc = kf.pb()

TINY = "builtin:tiny"
PROMPT = "The quick brown fox"

os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return kf.make_test_certs(tmp_path_factory.mktemp("certs"))


def tls_flags(certs: Path, mtls: bool = False) -> list[str]:
    flags = ["--http_port=-1", f"--tls_cert_file={certs / 'server.pem'}",
             f"--tls_key_file={certs / 'server.key'}"]
    if mtls:
        flags.append(f"--tls_client_ca_file={certs / 'ca.pem'}")
    return flags


def http_port(d: kf.Daemon) -> int:
    # The ready line reports the HTTP API's port with or without TLS.
    assert d.http_url, d.stdout_text()
    return int(d.http_url.rsplit(":", 1)[1])


def https_url(d: kf.Daemon, host: str = "127.0.0.1") -> str:
    return f"https://{host}:{http_port(d)}"


def ssl_context(certs: Path, ca: str = "ca", client: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / f"{ca}.pem"))
    if client is not None:
        ctx.load_cert_chain(certs / f"{client}.pem", certs / f"{client}.key")
    return ctx


def openai_client(url: str, ctx: ssl.SSLContext) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60,
                         http_client=httpx.Client(verify=ctx, trust_env=False, timeout=60))


def grpc_reference(d: kf.Daemon, certs: Path, client: str | None = None) -> kf.StreamResult:
    """PROMPT, 16 greedy tokens, through the gRPC port (TLS, and mTLS with `client`)."""
    root = (certs / "ca.pem").read_bytes()
    if client is None:
        creds = grpc.ssl_channel_credentials(root_certificates=root)
    else:
        creds = grpc.ssl_channel_credentials(
            root_certificates=root, private_key=(certs / f"{client}.key").read_bytes(),
            certificate_chain=(certs / f"{client}.pem").read_bytes())
    stub = pb2_grpc.KvServeStub(d.secure_channel(creds))
    return stream(stub, text_request(PROMPT, 16, ignore_eos=True)).check_ok()


def complete(client: openai.OpenAI, **kwargs):
    return client.completions.create(model=TINY, prompt=PROMPT, max_tokens=16, temperature=0,
                                     extra_body={"ignore_eos": True}, **kwargs)


def test_https(kvserve_factory, certs):
    d = kvserve_factory(*tls_flags(certs))
    assert f" http=127.0.0.1:{http_port(d)}" in d.stdout_text()
    ref = grpc_reference(d, certs)
    client = openai_client(https_url(d), ssl_context(certs))
    out = complete(client)
    assert out.choices[0].text == ref.text
    assert out.usage.completion_tokens == 16
    # SSE through TLS: the same text, chunk by chunk.
    chunks = list(complete(client, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == ref.text
    assert client.models.list().data[0].id == TINY
    # The certificate's other name, and /health, over HTTPS too.
    by_name = openai_client(https_url(d, "localhost"), ssl_context(certs))
    assert complete(by_name).choices[0].text == ref.text
    with httpx.Client(verify=ssl_context(certs), trust_env=False) as h:
        assert h.get(https_url(d) + "/health", timeout=30).status_code == 200
    # A client that trusts another CA refuses the server.
    with pytest.raises(openai.APIConnectionError):
        openai_client(https_url(d), ssl_context(certs, ca="other-ca")).models.list()


def test_plain_http_to_the_tls_port_fails_and_the_server_keeps_serving(kvserve_factory, certs):
    d = kvserve_factory(*tls_flags(certs))
    port = http_port(d)
    connections_before = kf.metric(d.metrics(), "kvserve_http_connections")
    # A connection that never starts its handshake holds no one else up.
    silent = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        for _ in range(3):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                with pytest.raises((http.client.HTTPException, ConnectionError)):
                    conn.request("POST", "/v1/completions",
                                 body=b'{"prompt": "x", "max_tokens": 2}',
                                 headers={"Content-Type": "application/json"})
                    conn.getresponse()
            finally:
                conn.close()
        # Not TLS, or a broken ClientHello: no HTTP answer (a TLS alert at most),
        # the connection closed.
        for raw in (b"\x00" * 64, b"\x16\x03\x01\x00\x05hello", b"GARBAGE\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(raw)
                try:
                    reply = s.recv(4096)
                except ConnectionResetError:
                    reply = b""
                assert reply == b"" or reply[0] == 0x15, (raw, reply)  # 0x15: alert record
        with openai_client(https_url(d), ssl_context(certs)) as client:
            assert complete(client).usage.completion_tokens == 16
    finally:
        silent.close()
    # Every connection is gone, the refused ones and the one the client
    # closed (the gauge counts open HTTP connections).
    samples = d.wait_metrics(
        lambda m: kf.metric(m, "kvserve_http_connections") <= connections_before, timeout=30)
    assert kf.metric(samples, "kvserve_http_connections") <= connections_before
    assert d.process.poll() is None


def test_mutual_tls(kvserve_factory, certs):
    d = kvserve_factory(*tls_flags(certs, mtls=True))
    url = https_url(d)
    # No client certificate, or one from another CA: refused, /health included
    # (as gRPC health on the gRPC port).
    for client in (None, "rogue-client"):
        with pytest.raises(openai.APIConnectionError):
            complete(openai_client(url, ssl_context(certs, client=client)))
        with httpx.Client(verify=ssl_context(certs, client=client), trust_env=False) as h:
            with pytest.raises(httpx.TransportError):
                h.get(url + "/health", timeout=30)
    # A certificate signed by --tls_client_ca_file: served, as on the gRPC port.
    ref = grpc_reference(d, certs, client="client")
    good = openai_client(url, ssl_context(certs, client="client"))
    assert complete(good).choices[0].text == ref.text
    chunks = list(complete(good, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == ref.text
    with httpx.Client(verify=ssl_context(certs, client="client"), trust_env=False) as h:
        assert h.get(url + "/health", timeout=30).status_code == 200
