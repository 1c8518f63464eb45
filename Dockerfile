# syntax=docker/dockerfile:1
# The stepscope sidecar, and the Python hook beside it for an init container to copy into a volume
# shared with the training container (deploy/kubernetes/README.md).
#
# The Node base: the current LTS by default; any image of Node 22.21+ or 24.6+ with npm will do
# (--max-old-space-size-percentage, below, is older than neither), e.g. a mirror of it:
#   docker build --build-arg NODE_IMAGE=registry.example.com/mirror/node:24-bookworm-slim .
ARG NODE_IMAGE=node:24-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
# npm's settings (a private registry and its token) and a CA to trust (a TLS-inspecting proxy's, or
# the registry's) come in as build secrets, so that neither is left in a layer; both are optional:
#   docker build --secret id=npmrc,src=$HOME/.npmrc --secret id=npmca,src=/path/to/ca.pem .
RUN --mount=type=secret,id=npmrc,target=/run/secrets/npmrc --mount=type=secret,id=npmca,target=/run/secrets/npmca \
    if [ -s /run/secrets/npmca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/npmca; fi; \
    NPM_CONFIG_USERCONFIG=/run/secrets/npmrc npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY scripts/build-validators.mjs ./scripts/
RUN npm run build && chmod +x dist/cli.js

FROM ${NODE_IMAGE} AS production-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=secret,id=npmrc,target=/run/secrets/npmrc --mount=type=secret,id=npmca,target=/run/secrets/npmca \
    if [ -s /run/secrets/npmca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/npmca; fi; \
    NPM_CONFIG_USERCONFIG=/run/secrets/npmrc npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

FROM ${NODE_IMAGE}
# A sidecar is reached from outside its container: by Prometheus and port-forward. Listening beyond
# loopback, serve refuses to start without a token: docker run -e STEPSCOPE_TOKEN=... (every request,
# /healthz and /metrics included, must then carry Authorization: Bearer <token>), or, on a network
# you trust, `serve --insecure` (-e STEPSCOPE_INSECURE=1).
# --out by default: the journal, each run's summary and HTML report, and the run history that each
# new run of a job is compared with (history/), and the only place written: with a volume there the
# container runs on a read-only root filesystem and keeps them past itself
# (docker run --read-only -v stepscope:/var/lib/stepscope); the Kubernetes manifests set their own.
# (No VOLUME: each container would leave an anonymous volume behind, unused where --out is elsewhere.)
# NODE_OPTIONS: Node's heap at half the container's memory limit (Node reads it from the cgroup), the
# other half for Node outside its heap and the probes' short-lived Node processes; serve sizes its
# --max-jobs and --max-ranks from both and logs what it chose (deploy/kubernetes/README.md). The young
# generation at most 3 × 8 MiB: V8 grows it to 48 MiB (192 on Node 24 without a limit) under a burst of
# steps, and 8 MiB semi-spaces held the sidecar to 132 MiB RSS where the default reached 157 at no CPU
# cost seen (BENCHMARKS.md, "The young generation's size"). Setting NODE_OPTIONS replaces this: keep
# both flags in it, or give --max-old-space-size that fits.
# MALLOC_MMAP_THRESHOLD_: glibc generally gives a block of 128 KiB or more its own mapping, returned
# when freed, instead of raising that bound to the largest block freed and keeping the journal's
# checkpoint lines in its heap (src/ingest/node-flags.ts; BENCHMARKS.md, "glibc's mmap threshold").
ENV NODE_ENV=production \
    NODE_OPTIONS="--max-old-space-size-percentage=50 --max-semi-space-size=8" \
    MALLOC_MMAP_THRESHOLD_=131072 \
    STEPSCOPE_HOST=0.0.0.0 \
    STEPSCOPE_PORT=9477 \
    STEPSCOPE_OUT=/var/lib/stepscope
WORKDIR /app
COPY --from=production-deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY docs ./docs
COPY python-hook ./python-hook
RUN ln -s /app/dist/cli.js /usr/local/bin/stepscope && mkdir -p /var/lib/stepscope && chown 1000:1000 /var/lib/stepscope
# Numeric, so that Kubernetes can check runAsNonRoot (it is the image's `node` user).
USER 1000:1000
EXPOSE 9477
# probe.js sends STEPSCOPE_TOKEN from the container's environment, as /healthz requires it too.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s \
  CMD ["node", "/app/dist/probe.js", "/healthz"]
# Node runs as PID 1 with no default signal handlers; stepscope serve installs its own for SIGTERM
# and SIGINT: it ends the open jobs, writes their summaries to --out and the log, and exits 0.
ENTRYPOINT ["node", "/app/dist/cli.js"]
CMD ["serve"]
