# syntax=docker/dockerfile:1.7
# hap-operator container image: the `hap` binary on a distroless, non-root runtime.
#
#   docker build -t ghcr.io/hap-operator/hap-operator:0.1.0 .
#
# NOT BUILT HERE: the development and CI machines of this project have no container engine, so
# this file is only linted (hadolint, from `make test`) and never built in CI. Build it where a
# BuildKit engine (docker, buildah, kaniko) is available.
#
# Reproducible: base images pinned by tag. The digests could not be resolved on the development
# machines (no registry access besides package registries); pin them where the image is built:
#   docker buildx imagetools inspect rust:1.95.0-slim-bookworm        → FROM rust:1.95.0-slim-bookworm@sha256:<digest>
#   docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot → ...:nonroot@sha256:<digest>
# The build is --locked (Cargo.lock) and --release, with source paths remapped and a fixed
# SOURCE_DATE_EPOCH, so the same commit gives the same binary.

ARG RUST_IMAGE=rust:1.95.0-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
WORKDIR /src
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0 \
    SOURCE_DATE_EPOCH=0 \
    RUSTFLAGS="--remap-path-prefix=/src=. --remap-path-prefix=/usr/local/cargo/registry/src=registry"
# Dependencies first, so that a source change does not refetch them.
COPY Cargo.toml Cargo.lock ./
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo fetch --locked
COPY benches ./benches
COPY src ./src
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --locked --release --bin hap \
 && install -D -m 0755 target/release/hap /out/hap

# glibc, CA certificates and /etc/passwd only: no shell, no package manager.
FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="hap-operator" \
      org.opencontainers.image.description="Hyperscaler Account Pool operator for Gardener" \
      org.opencontainers.image.source="https://github.com/hap-operator/hap-operator" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/hap /hap
# distroless "nonroot" (65532); numeric so that runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/hap"]
CMD ["run"]
