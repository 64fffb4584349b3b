#!/usr/bin/env bash
# Print the path of a helm binary, building it first if it is not cached: Debian has no helm
# package, so it is built from its Go module (`go install`, the Go module proxy) into
# .devstack/tools/helm-<version>/, cached like the Kafka jars. Usage: helm=$(devstack/tools/helm.sh)
set -euo pipefail
VERSION="${HELM_VERSION:-v3.21.4}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${DEVSTACK_DIR:-$root/.devstack}/tools/helm-$VERSION"
if [ ! -x "$dir/helm" ]; then
  command -v go >/dev/null || { echo "devstack/tools/helm.sh: needs Go to build helm $VERSION" >&2; exit 2; }
  echo "devstack/tools/helm.sh: building helm $VERSION (go install, a few minutes once)" >&2
  GOBIN="$dir" GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$VERSION" >&2
fi
echo "$dir/helm"
