"""Standard gRPC health checking and server reflection."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import kvserve_fixtures as kf


@pytest.mark.parametrize("service", ["", kf.SERVICE], ids=["overall", "kvserve"])
def test_health_serving(kvserve_daemon, service):
    stub = health_pb2_grpc.HealthStub(kvserve_daemon.channel())
    resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING, resp


def test_health_unknown_service_not_found(kvserve_daemon):
    stub = health_pb2_grpc.HealthStub(kvserve_daemon.channel())
    with pytest.raises(grpc.RpcError) as exc:
        stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND, exc.value


def _reflect(daemon, request):
    stub = reflection_pb2_grpc.ServerReflectionStub(daemon.channel())
    responses = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
    assert len(responses) == 1, responses
    return responses[0]


def test_reflection_lists_service(kvserve_daemon):
    resp = _reflect(kvserve_daemon, reflection_pb2.ServerReflectionRequest(list_services=""))
    assert resp.WhichOneof("message_response") == "list_services_response", resp
    names = [s.name for s in resp.list_services_response.service]
    assert kf.SERVICE in names, names


def test_reflection_file_containing_symbol(kvserve_daemon):
    from google.protobuf import descriptor_pb2

    resp = _reflect(kvserve_daemon,
                    reflection_pb2.ServerReflectionRequest(file_containing_symbol=kf.SERVICE))
    assert resp.WhichOneof("message_response") == "file_descriptor_response", resp
    files = [descriptor_pb2.FileDescriptorProto.FromString(b)
             for b in resp.file_descriptor_response.file_descriptor_proto]
    services = [f"{f.package}.{s.name}" for f in files for s in f.service]
    assert kf.SERVICE in services, services
    methods = {m.name for f in files for s in f.service if f"{f.package}.{s.name}" == kf.SERVICE
               for m in s.method}
    assert {"Generate", "GetModelInfo", "Tokenize", "Detokenize"} <= methods, methods


def test_reflection_v1_if_served(kvserve_daemon):
    # grpc.reflection.v1 is wire-compatible with v1alpha; the daemon may serve
    # only v1alpha (UNIMPLEMENTED here), but if it serves v1 it lists the service.
    call = kvserve_daemon.channel().stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
    try:
        responses = list(call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                              timeout=10))
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNIMPLEMENTED, (e.code(), e.details())
        return
    names = [s.name for s in responses[0].list_services_response.service]
    assert kf.SERVICE in names, names
