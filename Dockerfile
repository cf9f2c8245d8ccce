# syntax=docker/dockerfile:1
# The operator image: a release build (the same command as `make release`) on a minimal,
# non-root runtime image.
#   docker build -t applyset-operator:0.1.0 .

FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin applyset-operator \
 && cp target/release/applyset-operator /applyset-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /applyset-operator /applyset-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/applyset-operator"]
CMD ["run"]
