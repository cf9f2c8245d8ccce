# syntax=docker/dockerfile:1
# The operator image: a release build (the same command as `make release`) on a minimal,
# non-root runtime image.
#   docker build -t applyset-operator:0.1.0 .
#
# Both base images are pinned by digest (the multi-arch index of the tag), so a rebuild gets
# the bytes that were reviewed; the tag stays for the reader. To move to a newer image:
#   docker buildx imagetools inspect rust:1.95-bookworm --format '{{.Manifest.Digest}}'
# (tests/chart.rs checks that every FROM line carries a digest).

FROM rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1 AS builder
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin applyset-operator \
 && cp target/release/applyset-operator /applyset-operator

# kustomize, which builds the overlays of directory sources, from its Go module at a pinned
# version (the same as tests/testenv/build-kustomize.sh). Go comes from the Go module proxy as
# the official toolchain module, checked against its SHA-256; the modules it downloads are
# checked against the Go checksum database. The same pinned base image as the builder.
FROM rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1 AS kustomize
ARG TARGETARCH
ARG GO_VERSION=1.26.8
ARG KUSTOMIZE_VERSION=5.7.1
WORKDIR /go-toolchain
RUN TARGETARCH="${TARGETARCH:-amd64}" && case "$TARGETARCH" in \
      amd64) sum=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7 ;; \
      arm64) sum=02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99 ;; \
      *) echo "no pinned Go toolchain for $TARGETARCH" >&2; exit 1 ;; \
    esac \
 && curl -fsSLo go.zip "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go${GO_VERSION}.linux-${TARGETARCH}.zip" \
 && echo "$sum  go.zip" | sha256sum -c - \
 && unzip -q go.zip && rm go.zip \
 && export GOROOT="$PWD/golang.org/toolchain@v0.0.1-go${GO_VERSION}.linux-${TARGETARCH}" \
 && chmod +x "$GOROOT"/bin/* "$GOROOT"/pkg/tool/*/* \
 && cd / && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN=/out \
    "$GOROOT/bin/go" install -trimpath -ldflags="-s -w" "sigs.k8s.io/kustomize/kustomize/v5@v${KUSTOMIZE_VERSION}" \
 && /out/kustomize version

FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
COPY --from=builder /applyset-operator /applyset-operator
# Beside the operator: its default --kustomize-binary.
COPY --from=kustomize /out/kustomize /kustomize
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/applyset-operator"]
CMD ["run"]
