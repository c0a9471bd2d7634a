"""Bearer-token authentication, TLS and mutual TLS."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import kvserve_fixtures as kf
from kvserve_fixtures import stream, text_request

pb2, pb2_grpc = kf.pb()

TOKEN = "s3cret-Token_for-kvserve"


# ---------------------------------------------------------------------------
# Auth.


@pytest.fixture(scope="module")
def auth_daemon(kvserve_module_factory, tmp_path_factory):
    token_file = tmp_path_factory.mktemp("auth") / "token"
    token_file.write_text(TOKEN)
    return kvserve_module_factory(f"--auth_token_file={token_file}")


def _bearer(token: str):
    return (("authorization", f"Bearer {token}"),)


def test_auth_generate(auth_daemon):
    stub = auth_daemon.stub
    no_md = stream(stub, text_request("Hello", 4))
    assert no_md.code == grpc.StatusCode.UNAUTHENTICATED, no_md
    assert no_md.responses == []
    wrong = stream(stub, text_request("Hello", 4), metadata=_bearer("wrong-token"))
    assert wrong.code == grpc.StatusCode.UNAUTHENTICATED, wrong
    prefix = stream(stub, text_request("Hello", 4), metadata=_bearer(TOKEN[:-1]))
    assert prefix.code == grpc.StatusCode.UNAUTHENTICATED, prefix
    no_scheme = stream(stub, text_request("Hello", 4), metadata=(("authorization", TOKEN),))
    assert no_scheme.code == grpc.StatusCode.UNAUTHENTICATED, no_scheme
    ok = stream(stub, text_request("Hello", 4, ignore_eos=True), metadata=_bearer(TOKEN))
    ok.check_ok()
    assert len(ok.token_ids) == 4
    samples = auth_daemon.wait_metrics(
        lambda s: kf.metric(s, "kvserve_requests_rejected_total", 0,
                            reason="unauthenticated") >= 4
        and kf.metric_sum(s, "kvserve_requests_finished_total") >= 1)
    assert kf.metric(samples, "kvserve_requests_rejected_total", 0,
                     reason="unauthenticated") == 4, (
        kf.metric_series(samples, "kvserve_requests_rejected_total"))
    assert kf.metric_sum(samples, "kvserve_requests_finished_total") == 1


@pytest.mark.parametrize("method", ["GetModelInfo", "Tokenize", "Detokenize"])
def test_auth_unary_methods(auth_daemon, method):
    stub = auth_daemon.stub
    fn, request = {
        "GetModelInfo": (stub.GetModelInfo, pb2.GetModelInfoRequest()),
        "Tokenize": (stub.Tokenize, pb2.TokenizeRequest(text="Hello")),
        "Detokenize": (stub.Detokenize, pb2.DetokenizeRequest(token_ids=[72, 105])),
    }[method]
    for md in (None, _bearer("wrong-token")):
        e = kf.unary_error(fn, request, timeout=10, metadata=md)
        assert e is not None, f"{method} with metadata {md} succeeded"
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED, (e.code(), e.details())
    assert fn(request, timeout=10, metadata=_bearer(TOKEN)) is not None


def test_auth_health_and_reflection_need_no_token(auth_daemon):
    ch = auth_daemon.channel()
    health = health_pb2_grpc.HealthStub(ch)
    for service in ("", kf.SERVICE):
        resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(ch)
    resps = list(refl.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
    assert kf.SERVICE in [s.name for s in resps[0].list_services_response.service]


# ---------------------------------------------------------------------------
# TLS.


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return kf.make_test_certs(tmp_path_factory.mktemp("certs"))


def _creds(certs: Path, client: str | None = None, ca: str = "ca"):
    root = (certs / f"{ca}.pem").read_bytes()
    if client is None:
        return grpc.ssl_channel_credentials(root_certificates=root)
    return grpc.ssl_channel_credentials(
        root_certificates=root,
        private_key=(certs / f"{client}.key").read_bytes(),
        certificate_chain=(certs / f"{client}.pem").read_bytes())


def _info(channel, timeout: float = 10):
    return pb2_grpc.KvServeStub(channel).GetModelInfo(pb2.GetModelInfoRequest(),
                                                      timeout=timeout)


def _fails(channel) -> grpc.RpcError:
    try:
        info = _info(channel, timeout=5)
    except grpc.RpcError as e:
        return e
    pytest.fail(f"call succeeded but should not have: {info}")


def test_tls(kvserve_factory, certs):
    d = kvserve_factory(f"--tls_cert_file={certs / 'server.pem'}",
                        f"--tls_key_file={certs / 'server.key'}")
    secure = d.secure_channel(_creds(certs))
    info = _info(secure)
    assert info.vocab_size == kf.TINY_VOCAB
    res = stream(pb2_grpc.KvServeStub(secure), text_request("Hello", 8, ignore_eos=True))
    res.check_ok()
    assert res.token_ids == kf.reference_generate("Hello", 8, ignore_eos=True)["token_ids"]
    health = health_pb2_grpc.HealthStub(secure)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == \
        health_pb2.HealthCheckResponse.SERVING
    # The hostname form of the address is covered by the certificate too.
    port = d.grpc_address.rsplit(":", 1)[1]
    by_name = grpc.secure_channel(f"localhost:{port}", _creds(certs), options=kf.GRPC_OPTIONS)
    try:
        assert _info(by_name).vocab_size == kf.TINY_VOCAB
    finally:
        by_name.close()
    # Plaintext is refused; so is a client that trusts another CA.
    _fails(d.channel())
    _fails(d.secure_channel(_creds(certs, ca="other-ca")))
    # The metrics endpoint stays plain HTTP.
    assert "kvserve_server_info" in d.metrics_text()


def test_mutual_tls(kvserve_factory, certs):
    d = kvserve_factory(f"--tls_cert_file={certs / 'server.pem'}",
                        f"--tls_key_file={certs / 'server.key'}",
                        f"--tls_client_ca_file={certs / 'ca.pem'}")
    _fails(d.secure_channel(_creds(certs)))  # no client certificate
    _fails(d.secure_channel(_creds(certs, client="rogue-client")))  # signed by another CA
    _fails(d.channel())  # plaintext
    ch = d.secure_channel(_creds(certs, client="client"))
    assert _info(ch).vocab_size == kf.TINY_VOCAB
    res = stream(pb2_grpc.KvServeStub(ch), text_request("Hello", 8, ignore_eos=True))
    res.check_ok()
    assert len(res.token_ids) == 8
