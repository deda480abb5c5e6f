# syntax=docker/dockerfile:1
# Builds the single `orchestrator` binary. The same image runs the
# orchestrator (`serve`), the reference participants (`participants`), the
# demo and the migrations; docker-compose.yml picks the subcommand.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/orchestrator ./cmd/orchestrator

FROM debian:bookworm-slim
# curl serves the container healthcheck (GET /readyz).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 sagaflow
COPY --from=build /out/orchestrator /usr/local/bin/orchestrator
USER sagaflow
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/orchestrator"]
CMD ["serve"]
