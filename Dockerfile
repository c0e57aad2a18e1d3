# syntax=docker/dockerfile:1.7
# hap-operator image for machines that can pull a Rust image: the same image as `make image`
# builds from the Containerfile (static musl `hap` at /hap, the CA bundle, user 65532, FROM
# scratch), with the binary compiled in a build stage instead of on the host.
#
#   docker build -t ghcr.io/hap-operator/hap-operator:0.1.0 .
#
# `make image` (scripts/image.sh + Containerfile) is what this project builds and tests: CI runs
# that image as pods on a real kubelet. This file is only linted here (hadolint, in `make test`),
# because no registry can be reached to pull the Rust image; pin its digest where you build:
#   docker buildx imagetools inspect rust:1.95.0-slim-bookworm → FROM rust:1.95.0-slim-bookworm@sha256:<digest>

ARG RUST_IMAGE=rust:1.95.0-slim-bookworm

FROM ${RUST_IMAGE} AS build
# musl-gcc compiles ring's C for the musl target (Debian 12's musl-tools).
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools=1.2.3-1 \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0 \
    SOURCE_DATE_EPOCH=0 \
    CC_x86_64_unknown_linux_musl=musl-gcc \
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="--remap-path-prefix=/src=. --remap-path-prefix=/usr/local/cargo/registry/src=registry -C target-feature=+crt-static"
# Dependencies first, so that a source change does not refetch them.
COPY Cargo.toml Cargo.lock ./
COPY crates/hap-core/Cargo.toml crates/hap-core/Cargo.toml
COPY crates/hap-testkit/Cargo.toml crates/hap-testkit/Cargo.toml
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo fetch --locked
COPY benches ./benches
COPY crates ./crates
COPY src ./src
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --locked --profile image --target x86_64-unknown-linux-musl --bin hap \
 && install -D -m 0555 target/x86_64-unknown-linux-musl/image/hap /out/hap \
 && install -D -m 0444 /etc/ssl/certs/ca-certificates.crt /out/ca-certificates.crt

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="hap-operator" \
      org.opencontainers.image.description="Hyperscaler Account Pool operator for Gardener" \
      org.opencontainers.image.source="https://github.com/hap-operator/hap-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/hap /hap
# As in the Containerfile (a test compares them): the allocator's settings.
ENV MIMALLOC_ALLOW_THP=0
ENV MIMALLOC_PURGE_DELAY=0
# Numeric, so that the kubelet can check runAsNonRoot without an /etc/passwd.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/hap"]
CMD ["run"]
