# kvserve container image: the daemon, its command-line client (the health
# probe) and the SentencePiece module, on a slim runtime base, as a non-root
# user. See deploy/README.md.
#
#   CPU (the default; Debian 12 for build and runtime):
#     podman build -t localhost/kvserve:cpu .          # or: docker build ...
#   CUDA (Ubuntu 24.04 CUDA images: Debian 12's toolchain and library
#   versions, CMake >= 3.25):
#     podman build -t localhost/kvserve:cuda --build-arg VARIANT=cuda \
#       --build-arg BASE_IMAGE=nvidia/cuda:12.6.3-devel-ubuntu24.04 \
#       --build-arg RUNTIME_IMAGE=nvidia/cuda:12.6.3-runtime-ubuntu24.04 .
#
# VARIANT=cuda needs the CUDA base images above (the build fails early and
# says so otherwise). It adds the CUDA backend module next to kvserve: with
# the default --backend=auto the cuda image serves on the GPU when the
# container sees one, else on the CPU; --backend=cuda insists on the GPU.
# Backend status (what has run on which GPU): docs/cuda.md, "Backend status".
#
# Why the base images are build arguments and not `FROM build-${VARIANT}`
# stages: Debian 12's buildah/podman (1.28 / 4.3) does not resolve a stage
# name built from an ARG (containers/buildah#4607) and would try to pull it.
#
# Runtime: ENTRYPOINT fixes the listen addresses (gRPC 0.0.0.0:50051, metrics
# 0.0.0.0:9400; the HEALTHCHECK probes 50051); CMD holds the model and the
# tuning flags:
#   podman run --rm -p 127.0.0.1:50051:50051 -p 127.0.0.1:9400:9400 localhost/kvserve:cpu
#   podman run --rm -v /srv/models:/models:ro ... localhost/kvserve:cpu --model=/models/NAME
# A later flag wins over an earlier one, so CMD may override the ENTRYPOINT's.

ARG VARIANT=cpu
ARG BASE_IMAGE=debian:bookworm-slim
ARG RUNTIME_IMAGE=debian:bookworm-slim

# ---------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS build
ARG VARIANT
# Parallel compile jobs; empty: ninja's default (all cores).
ARG BUILD_JOBS=
ENV DEBIAN_FRONTEND=noninteractive

RUN case "${VARIANT}" in \
      cpu) ;; \
      cuda) command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { \
              echo "VARIANT=cuda needs a CUDA devel base image, e.g." \
                   "--build-arg BASE_IMAGE=nvidia/cuda:12.6.3-devel-ubuntu24.04" \
                   "--build-arg RUNTIME_IMAGE=nvidia/cuda:12.6.3-runtime-ubuntu24.04" >&2; \
              exit 1; } ;; \
      *) echo "VARIANT must be cpu or cuda, got '${VARIANT}'" >&2; exit 1 ;; \
    esac

# scripts/setup.sh's C++ packages (no Python, no benchmarks); GTest only
# because the top-level CMakeLists configures the test tree.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libgtest-dev libgmock-dev \
      libabsl-dev libboost-dev nlohmann-json3-dev libspdlog-dev libfmt-dev \
      libsentencepiece-dev libpcre2-dev libutf8proc-dev \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc prometheus-cpp-dev \
      libssl-dev curl \
      libzmq3-dev cppzmq-dev libmsgpack-cxx-dev \
 && rm -rf /var/lib/apt/lists/*

# xgrammar's pinned source distribution (structured outputs; the build
# compiles it into the daemon: third_party/xgrammar/), from PyPI's file host,
# checked against the sha256 that scripts/fetch_xgrammar.sh pins too.
ARG XGRAMMAR_SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
RUN mkdir -p /sdist \
 && curl -fsSL -o /sdist/xgrammar-0.2.9.tar.gz \
      https://files.pythonhosted.org/packages/source/x/xgrammar/xgrammar-0.2.9.tar.gz \
 && echo "${XGRAMMAR_SHA256}  /sdist/xgrammar-0.2.9.tar.gz" | sha256sum -c -

WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DKVSERVE_XGRAMMAR_SDIST=/sdist/xgrammar-0.2.9.tar.gz \
 && cmake --build /build ${BUILD_JOBS:+--parallel ${BUILD_JOBS}} \
      --target kvserve kvserve-client kvserve_sentencepiece \
 && if [ "${VARIANT}" = cuda ]; then \
      cmake --build /build ${BUILD_JOBS:+--parallel ${BUILD_JOBS}} --target kvserve_cuda_backend; \
    fi

# /out/bin: what the runtime stage copies. The SentencePiece module (and, for
# VARIANT=cuda, the CUDA backend module) sits next to the kvserve executable,
# where the daemon looks for it.
# /out/runtime-packages.txt: the packages owning every library ldd resolves.
RUN mkdir -p /out/bin \
 && cp /build/server/kvserve /build/tools/kvserve-client /build/lib/libkvserve_sentencepiece.so /out/bin/ \
 && if [ -f /build/lib/libkvserve_cuda_backend.so ]; then \
      cp /build/lib/libkvserve_cuda_backend.so /out/bin/; \
    fi \
 && strip --strip-unneeded /out/bin/* \
 && sh deploy/docker/runtime-packages.sh /out/bin/* > /out/runtime-packages.txt \
 && echo "runtime packages:" $(cat /out/runtime-packages.txt)

# ---------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
ARG VARIANT
ENV DEBIAN_FRONTEND=noninteractive

COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs apt-get install -y --no-install-recommends < /tmp/runtime-packages.txt \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt

# A fixed numeric uid/gid, so that Kubernetes' runAsNonRoot can verify it.
RUN groupadd --system --gid 10001 kvserve \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin kvserve \
 && mkdir -p /models

COPY --from=build /out/bin/ /opt/kvserve/bin/
ENV PATH=/opt/kvserve/bin:${PATH} \
    KVSERVE_SENTENCEPIECE_MODULE=/opt/kvserve/bin/libkvserve_sentencepiece.so
LABEL org.opencontainers.image.title="kvserve" \
      org.opencontainers.image.description="kvserve LLM inference server (${VARIANT})"

USER 10001:10001
# gRPC API, Prometheus /metrics.
EXPOSE 50051 9400
# Exits 0 only when the server reports SERVING (not while it starts, drains,
# or its engine is stalled). Podman keeps HEALTHCHECK only in docker format
# images: `podman build --format docker`.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["kvserve-client", "--address=127.0.0.1:50051", "--timeout_s=4", "health"]
# SIGTERM (docker/podman stop, Kubernetes) drains: health turns NOT_SERVING,
# new RPCs get UNAVAILABLE, in-flight ones finish within --drain_timeout_s,
# then the process exits 0. Give `stop` a longer timeout than that (-t 45).
STOPSIGNAL SIGTERM
ENTRYPOINT ["kvserve", "--host=0.0.0.0", "--port=50051", "--metrics_host=0.0.0.0", "--metrics_port=9400"]
CMD ["--model=builtin:tiny", "--drain_timeout_s=30"]
