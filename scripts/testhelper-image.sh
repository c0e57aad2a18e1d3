#!/usr/bin/env bash
# The test-only image of e2e/testhelper (FROM scratch, the static Go binary alone), for the pods
# that tests/it/e2e_pods_callers.rs runs as an attacker on the node environment: the shipped image
# has no HTTP client, and a pod that forges admission reviews brings its own. Never shipped:
# nothing in deploy/ names it.
#
# Built with buildah as scripts/image.sh builds the shipped image (--timestamp 0, no network,
# configuration under the cache), into an OCI archive cached by the helper binary's source hash
# and this script's; rebuilt only when that archive is missing. Prints its path on stdout;
# progress and the build time go to stderr.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/ensure-node-tools.sh" image
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
# The reference the tests run (imagePullPolicy: Never).
image="localhost/hap-testenv/testhelper:e2e"

bin=$("$root/e2e/build-testhelper.sh")
key=$({ basename "$(dirname "$bin")"; cat "$root/scripts/testhelper-image.sh" "$root/scripts/buildah-env.sh"; } \
  | sha256sum | cut -c1-16)
out="$cache/testhelper-image-$key"
archive="$out/testhelper.oci.tar"
if [ -s "$archive" ]; then
  echo "$archive"
  exit 0
fi
mkdir -p "$out"
start=$(date +%s)
# shellcheck source=scripts/buildah-env.sh
. "$root/scripts/buildah-env.sh"
ctx=$(mktemp -d "$out/context.XXXXXX")
tag="localhost/hap-testhelper-build:$$"
cleanup() {
  buildah rmi -f "$tag" >/dev/null 2>&1 || true
  rm -rf "$ctx" "$archive.tmp"
  if [ "$blob_cache_was_there" = no ]; then rm -rf /var/lib/containers; fi
}
trap cleanup EXIT
install -m 0555 "$bin" "$ctx/testhelper"
cat >"$ctx/Containerfile" <<'EOF'
FROM scratch
COPY --chmod=0555 testhelper /testhelper
USER 65532:65532
ENTRYPOINT ["/testhelper"]
EOF
buildah bud --quiet --timestamp 0 --network none --layers=false --pull-never \
  --signature-policy "$conf/policy.json" -f "$ctx/Containerfile" -t "$tag" "$ctx" >/dev/null
buildah push --quiet --signature-policy "$conf/policy.json" "$tag" "oci-archive:$archive.tmp:$image" >&2
mv -f "$archive.tmp" "$archive"
echo "testhelper image: $image, OCI archive $(stat -c %s "$archive") bytes, built in $(( $(date +%s) - start ))s" >&2
echo "$archive"
