# syntax=docker/dockerfile:1
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev

FROM node:20-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY docs ./docs
# The hook travels with the image so an init step can copy it into a volume shared with the
# training container, for training images that cannot pip install.
COPY python-hook ./python-hook
USER node
EXPOSE 9477
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.STEPSCOPE_PORT||9477)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# PID 1 gets no default signal handlers; stepscope installs its own for SIGTERM and SIGINT,
# so the journal is flushed and the job ended when the pod stops.
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["serve", "--host", "127.0.0.1", "--port", "9477"]
