# syntax=docker/dockerfile:1
# The stepscope sidecar, and the Python hook beside it for an init container to copy into a volume
# shared with the training container (deploy/kubernetes/README.md).

FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json ./
COPY src ./src
RUN npm run build && chmod +x dist/cli.js

FROM node:20-bookworm-slim AS production-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force

FROM node:20-bookworm-slim
# A sidecar is reached from outside its container: by Prometheus and port-forward. Listening beyond
# loopback, serve refuses to start without a token: docker run -e STEPSCOPE_TOKEN=... (every request,
# /healthz and /metrics included, must then carry Authorization: Bearer <token>), or, on a network
# you trust, `serve --insecure` (-e STEPSCOPE_INSECURE=1).
# --out by default: the journal, each run's summary and HTML report, and the run history that each
# new run of a job is compared with (history/). Mount a volume there to keep them past the container
# (docker run -v stepscope:/var/lib/stepscope); the Kubernetes manifests set their own.
ENV NODE_ENV=production \
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
