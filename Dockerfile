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

FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
COPY --from=builder /applyset-operator /applyset-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/applyset-operator"]
CMD ["run"]
