# syntax=docker/dockerfile:1.7
#
# protection-manager container image.
#
#   make image                      # docker (or podman) build, tagged with the workspace version
#   docker build -t protection-manager:dev .
#
# Two stages: the release binary is built in the official Rust image, then
# copied alone into a distroless runtime (glibc and CA certificates, no shell,
# no package manager) that runs as the non-root user 65532 ("nonroot"). The
# Helm chart's pod securityContext (runAsNonRoot, runAsUser 65532, read-only
# root filesystem, all capabilities dropped) matches it: the manager writes no
# files.

# The toolchain the project is tested with (the workspace's rust-version is the
# minimum, 1.89).
ARG RUST_VERSION=1.95
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
# Manifests first, so that the dependency layer is cached while only sources
# change.
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --profile dist --locked -p protection-manager --bin protection-manager \
 && install -D -m 0755 target/dist/protection-manager /out/protection-manager

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.4.0
LABEL org.opencontainers.image.title="protection-manager" \
      org.opencontainers.image.description="Kubernetes protection finalizers (pv-protection, pvc-protection, Service load-balancer cleanup) in one controller manager" \
      org.opencontainers.image.source="https://github.com/protection-manager/protection-manager" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/protection-manager /usr/local/bin/protection-manager
USER 65532:65532
# Admin server: /metrics, /healthz, /readyz (--admin-address).
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/protection-manager"]
CMD ["run"]
